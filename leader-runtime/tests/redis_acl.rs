//! ACL user and password from the URL, against a real `redis-server` whose
//! user has only the permissions `ConfigBuilder::redis_url` documents; a
//! wrong password fails clearly and never shows up in an error, in `Debug`
//! output or in the logs.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader_runtime::{Config, Error, Event, LostReason, Runtime};
use leader_testkit::RedisServer;
use tokio::time::{timeout, Instant};

mod support;
use support::{elected, instance, ACL_RULES, BALANCE_RULES, G, RENEW, TTL};

const PASSWORD: &str = "app-s3cret-pw";
const WRONG: &str = "wr0ng-pa55word";
/// Exactly the rules the docs of `ConfigBuilder::redis_url` list.
const RULES: &str = ACL_RULES;

async fn server() -> RedisServer {
    RedisServer::builder()
        .password("admin-pw")
        .acl_user("app", PASSWORD, RULES)
        .start()
        .await
        .unwrap()
}

fn url(server: &RedisServer, password: &str) -> String {
    format!("redis://app:{password}@127.0.0.1:{}", server.port())
}

#[tokio::test]
async fn a_least_privilege_acl_user_from_the_url_elects_and_hands_over() {
    let server = server().await;
    let a = instance(url(&server, PASSWORD), "a");
    let b = instance(url(&server, PASSWORD), "b");
    assert_eq!(a.leader_id(G).await.unwrap(), None);
    let mut a_events = a.subscribe();
    assert!(a.run_if_leader(G, || async {}).await.is_none());
    let t1 = elected(&mut a_events, TTL * 3).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    assert_eq!(b.leader_id(G).await.unwrap().as_deref(), Some("a"));
    // Renewals keep working under the user's rules.
    tokio::time::sleep(RENEW * 3).await;
    assert!(a.is_leader(G));
    // The release notice reaches b: SUBSCRIBE and PUBLISH are allowed on the channel.
    let mut b_events = b.subscribe();
    let start = Instant::now();
    a.step_down(G).await.unwrap();
    let t2 = elected(&mut b_events, TTL).await;
    let handover = start.elapsed();
    server.check(
        handover < Duration::from_millis(300),
        format!("handover took {handover:?}"),
    );
    assert!(t2 > t1);
    // Everything ran as `app`, which the server logged no ACL denial for.
    let denials = server.cmd(&["ACL", "LOG"]).await.unwrap();
    server.check(
        matches!(&denials, leader_testkit::Reply::Array(v) if v.is_empty()),
        format!("ACL denials: {denials:?}"),
    );
    b.shutdown().await;
    a.shutdown().await;
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_wrong_password_fails_clearly_and_is_never_shown() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // A current-thread runtime: every task of the runtime logs here.
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = server().await;
    let bad_url = url(&server, WRONG);
    let config = Config::builder()
        .redis_url(&bad_url)
        .ttl(TTL)
        .renew_interval(RENEW)
        .retry_interval(Duration::from_millis(200))
        .instance_id("bad")
        .build()
        .unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains(WRONG), "{debug}");
    assert!(debug.contains("app:***@"), "{debug}");
    let rt = Runtime::new(config).unwrap();
    assert!(!format!("{rt:?}").contains(WRONG));

    let err = rt.leader_id(G).await.unwrap_err();
    let shown = err.to_string();
    // Refused credentials: a configuration error no retry fixes.
    assert!(
        matches!(err, Error::Misconfigured { .. }) && err.is_config(),
        "{err:?}"
    );
    assert!(
        shown.contains("WRONGPASS") || shown.to_lowercase().contains("auth"),
        "the error must say it is about authentication: {shown}"
    );
    assert!(!shown.contains(WRONG), "{shown}");
    assert!(!format!("{err:?}").contains(WRONG));

    // The election keeps failing (and logging) without electing.
    let mut events = rt.subscribe();
    assert!(rt.run_if_leader(G, || async {}).await.is_none());
    let deadline = Instant::now() + TTL;
    let mut reported = Vec::new();
    while let Ok(Ok(event)) = timeout(deadline - Instant::now(), events.recv()).await {
        match event {
            Event::Elected { .. } => panic!("elected with a wrong password"),
            Event::BackendError { message, .. } => reported.push(message),
            _ => {}
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    assert!(!rt.is_leader(G));
    for message in &reported {
        assert!(!message.contains(WRONG), "{message}");
    }
    rt.shutdown().await;

    let logs = captured.text();
    assert!(
        logs.contains("WRONGPASS") || logs.to_lowercase().contains("auth"),
        "the failure is logged:\n{logs}"
    );
    assert!(
        !logs.contains(WRONG),
        "the password leaked into the logs:\n{logs}"
    );
    // The release-notice connection's failure says whose it is, with the hint.
    let notice_line = logs
        .lines()
        .find(|l| l.contains("release-notice connection down"))
        .unwrap_or_else(|| panic!("no release-notice warning:\n{logs}"));
    assert!(
        notice_line.contains("WARN") && notice_line.contains("redis refused the connection"),
        "{notice_line}"
    );
    assert!(!logs.contains("group `*`"), "{logs}");
}

#[tokio::test]
async fn a_user_without_the_control_channel_still_elects_and_sees_pauses_at_renewal() {
    // The rules of earlier versions: no `&leader:control`.
    let old_rules = RULES.replace(" &leader:control", "");
    let server = RedisServer::builder()
        .password("admin-pw")
        .acl_user("app", PASSWORD, &old_rules)
        .start()
        .await
        .unwrap();
    // A long ttl: without release notices a follower would wait for the
    // lease's expiry (seconds) to take over.
    let ttl = Duration::from_secs(3);
    let instance = |id: &str| {
        Runtime::new(
            Config::builder()
                .redis_url(url(&server, PASSWORD))
                .ttl(ttl)
                .renew_interval(RENEW)
                .retry_interval(Duration::from_millis(200))
                .instance_id(id)
                .build()
                .unwrap(),
        )
        .unwrap()
    };
    let (a, b) = (instance("a"), instance("b"));
    let mut a_events = a.subscribe();
    assert!(a.run_if_leader(G, || async {}).await.is_none());
    elected(&mut a_events, ttl * 3).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    // The SUBSCRIBE to the control channel was refused; the release
    // channel's notices still arrive: a hand-over in about one round trip.
    let mut b_events = b.subscribe();
    let start = Instant::now();
    a.step_down(G).await.unwrap();
    elected(&mut b_events, ttl).await;
    let handover = start.elapsed();
    server.check(
        handover < Duration::from_secs(1),
        format!("handover took {handover:?}: no release notice"),
    );
    // Paused by someone allowed to: b's renewal finds it.
    server
        .cmd(&["HSET", "leader:{jobs}:paused", "by", "ops"])
        .await
        .unwrap();
    let paused = Instant::now();
    let lost = timeout(RENEW * 5, async {
        loop {
            if let Event::Lost { reason, .. } = b_events.recv().await.unwrap() {
                return reason;
            }
        }
    })
    .await;
    server.check(
        lost.as_ref().ok() == Some(&LostReason::SteppedDown),
        format!("b did not hand over after the pause: {lost:?}"),
    );
    // Within one renew interval, with margin for a busy machine.
    assert!(
        paused.elapsed() <= RENEW + Duration::from_millis(900),
        "{:?}",
        paused.elapsed()
    );
    a.shutdown().await;
    b.shutdown().await;
}

fn balanced(url: &str, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(url)
            .ttl(TTL)
            .renew_interval(RENEW)
            .retry_interval(Duration::from_millis(200))
            .instance_id(id)
            .balance_leadership(true)
            .build()
            .unwrap(),
    )
    .unwrap()
}

const GROUPS: [&str; 4] = ["g0", "g1", "g2", "g3"];

fn led(rt: &Runtime) -> usize {
    GROUPS.iter().filter(|g| rt.is_leader(g)).count()
}

/// Leads of `a` and `b` once `limit` passed or they lead `want`, checking
/// every 5 ms that no group has two leaders.
async fn shares_within(
    a: &Runtime,
    b: &Runtime,
    want: (usize, usize),
    limit: Duration,
) -> (usize, usize) {
    let end = Instant::now() + limit;
    loop {
        let same = std::ptr::eq(a, b);
        for g in GROUPS {
            assert!(
                same || !(a.is_leader(g) && b.is_leader(g)),
                "{g} has two leaders"
            );
        }
        let now = (led(a), led(b));
        if now == want || Instant::now() >= end {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Two balanced instances whose ACL user has `rules`: `a` campaigns first,
/// then `b`; what they lead after a few renew intervals.
async fn balanced_shares(rules: &str) -> (usize, usize) {
    let server = RedisServer::builder()
        .password("admin-pw")
        .acl_user("app", PASSWORD, rules)
        .start()
        .await
        .unwrap();
    let url = url(&server, PASSWORD);
    let a = balanced(&url, "a");
    for g in GROUPS {
        let _ = a.run_if_leader(g, || async {}).await;
    }
    assert_eq!(shares_within(&a, &a, (4, 4), TTL * 3).await.0, 4);
    let b = balanced(&url, "b");
    for g in GROUPS {
        let _ = b.run_if_leader(g, || async {}).await;
    }
    let shares = shares_within(&a, &b, (2, 2), RENEW * 10).await;
    if shares == (2, 2) {
        // A clean leaver's groups come back at once.
        b.shutdown().await;
        assert_eq!(
            shares_within(&a, &b, (4, 0), RENEW).await,
            (4, 0),
            "{}",
            server.report()
        );
    }
    a.shutdown().await;
    shares
}

#[tokio::test]
async fn the_documented_acl_user_balances_leadership() {
    assert_eq!(
        balanced_shares(&format!("{RULES}{BALANCE_RULES}")).await,
        (2, 2)
    );
}

#[tokio::test]
async fn without_the_balance_rules_each_instance_keeps_what_it_leads() {
    assert_eq!(balanced_shares(RULES).await, (4, 0));
}
