//! The fault-injecting proxy, in every mode, in front of a real redis-server.

use std::io;
use std::time::{Duration, Instant};

use leader_testkit::{FaultProxy, Mode, RedisServer, Reply, RespConn};

const MS: Duration = Duration::from_millis(1);
/// Extra time allowed on top of any expected latency (loaded CI machines).
const MARGIN: Duration = Duration::from_secs(1);
/// How long a read must stay unanswered to count as "held".
const HELD: Duration = Duration::from_millis(300);

async fn setup() -> (RedisServer, FaultProxy) {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    assert_eq!(proxy.upstream(), server.addr());
    (server, proxy)
}

async fn ping_rtt(conn: &mut RespConn) -> Duration {
    let start = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(10), conn.cmd(&["PING"]))
        .await
        .expect("PING through the proxy timed out")
        .unwrap();
    assert_eq!(reply, "PONG");
    start.elapsed()
}

/// Reads one reply, which must arrive within `within`.
async fn reply_within(conn: &mut RespConn, within: Duration) -> Reply {
    tokio::time::timeout(within, conn.read_reply())
        .await
        .unwrap_or_else(|_| panic!("no reply within {within:?}"))
        .unwrap()
}

/// Asserts that no reply arrives for [`HELD`].
async fn assert_held(conn: &mut RespConn) {
    if let Ok(r) = tokio::time::timeout(HELD, conn.read_reply()).await {
        panic!("expected nothing to arrive, got {r:?}");
    }
}

fn is_reset_or_eof(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe
    )
}

#[tokio::test]
async fn pass_forwards_and_counts_connections() {
    let (server, proxy) = setup().await;
    assert_eq!(proxy.mode(), Mode::Pass);
    assert_eq!(proxy.url(), format!("redis://{}", proxy.addr()));
    assert_ne!(proxy.addr(), server.addr());

    let mut a = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(a.cmd(&["SET", "k", "v"]).await.unwrap(), "OK");
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), "v");
    let mut b = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(b.cmd(&["GET", "k"]).await.unwrap(), "v");
    assert_eq!(proxy.connections(), 2);
    assert_eq!(proxy.accepted(), 2);

    drop(a);
    proxy.wait_connections(1, MARGIN).await.unwrap();
    assert_eq!(b.cmd(&["PING"]).await.unwrap(), "PONG");
    assert!(ping_rtt(&mut b).await < 100 * MS);

    // A large value crosses many chunks intact.
    let big = "x".repeat(1 << 20);
    assert_eq!(b.cmd(&["SET", "big", &big]).await.unwrap(), "OK");
    assert_eq!(b.cmd(&["GET", "big"]).await.unwrap(), big.as_str());
}

#[tokio::test]
async fn delay_applies_in_both_directions() {
    let (_server, proxy) = setup().await;
    let mut conn = RespConn::connect(proxy.addr()).await.unwrap();
    let latency = 100 * MS;
    proxy.delay(latency);
    assert_eq!(proxy.mode(), Mode::Delay(latency));
    for _ in 0..3 {
        let rtt = ping_rtt(&mut conn).await;
        assert!(rtt >= 2 * latency, "round trip {rtt:?} < 2 × {latency:?}");
        assert!(rtt < 2 * latency + MARGIN, "round trip {rtt:?}");
    }
    proxy.pass();
    let rtt = ping_rtt(&mut conn).await;
    assert!(rtt < latency, "still delayed after pass(): {rtt:?}");
}

#[tokio::test]
async fn jitter_stays_within_bounds_and_varies() {
    let (_server, proxy) = setup().await;
    let mut conn = RespConn::connect(proxy.addr()).await.unwrap();
    let (min, max) = (30 * MS, 60 * MS);
    proxy.jitter(min, max);
    let mut rtts = Vec::new();
    for _ in 0..10 {
        rtts.push(ping_rtt(&mut conn).await);
    }
    for rtt in &rtts {
        assert!(
            *rtt >= 2 * min,
            "round trip {rtt:?} < 2 × {min:?}: {rtts:?}"
        );
        assert!(*rtt < 2 * max + MARGIN, "round trip {rtt:?}: {rtts:?}");
    }
    let spread = *rtts.iter().max().unwrap() - *rtts.iter().min().unwrap();
    assert!(spread > 5 * MS, "no jitter: {rtts:?}");
}

#[tokio::test]
async fn jitter_never_reorders_bytes() {
    let (server, proxy) = setup().await;
    let mut conn = RespConn::connect(proxy.addr()).await.unwrap();
    proxy.jitter(Duration::ZERO, 30 * MS);
    // Many small writes, spaced so that the proxy reads them as separate
    // chunks and draws a different hold for each.
    let n = 40;
    for i in 0..n {
        conn.send(&["APPEND", "k", &format!("{i},")]).await.unwrap();
        tokio::time::sleep(MS).await;
    }
    let mut expected = String::new();
    for i in 0..n {
        expected.push_str(&format!("{i},"));
        // Replies in order: the lengths grow with every APPEND.
        let len = reply_within(&mut conn, 5 * MARGIN).await;
        assert_eq!(len, expected.len() as i64, "reply {i}");
    }
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), expected.as_str());
}

#[tokio::test]
async fn switching_mode_releases_held_bytes() {
    let (_server, proxy) = setup().await;
    let mut conn = RespConn::connect(proxy.addr()).await.unwrap();
    proxy.delay(Duration::from_secs(30));
    conn.send(&["PING"]).await.unwrap();
    assert_held(&mut conn).await;
    let start = Instant::now();
    proxy.pass();
    assert_eq!(reply_within(&mut conn, MARGIN).await, "PONG");
    assert!(start.elapsed() < MARGIN);
}

#[tokio::test]
async fn blackhole_holds_requests_until_pass() {
    let (server, proxy) = setup().await;
    let mut conn = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(conn.cmd(&["PING"]).await.unwrap(), "PONG");

    proxy.blackhole();
    assert_eq!(proxy.mode(), Mode::Blackhole);
    conn.send(&["INCR", "n"]).await.unwrap();
    assert_held(&mut conn).await;
    // The request did not reach the server either.
    assert!(server.cmd(&["GET", "n"]).await.unwrap().is_nil());
    // A connection made during the blackhole is open but silent.
    let mut late = RespConn::connect(proxy.addr()).await.unwrap();
    late.send(&["PING"]).await.unwrap();
    assert_held(&mut late).await;
    assert_eq!(proxy.connections(), 2);

    proxy.pass();
    // Buffered, not dropped: both get their replies, in order.
    assert_eq!(reply_within(&mut conn, MARGIN).await, 1);
    assert_eq!(reply_within(&mut late, MARGIN).await, "PONG");
    assert_eq!(conn.cmd(&["INCR", "n"]).await.unwrap(), 2);
}

#[tokio::test]
async fn blackhole_holds_server_pushes_until_pass() {
    let (server, proxy) = setup().await;
    let mut sub = RespConn::connect(proxy.addr()).await.unwrap();
    let ack = sub.cmd(&["SUBSCRIBE", "ch"]).await.unwrap();
    assert_eq!(
        ack,
        Reply::Array(vec![
            Reply::Bulk("subscribe".into()),
            Reply::Bulk("ch".into()),
            Reply::Integer(1)
        ])
    );

    proxy.blackhole();
    // Published directly, not through the proxy: only server → client is tested.
    assert_eq!(server.cmd(&["PUBLISH", "ch", "hello"]).await.unwrap(), 1);
    assert_held(&mut sub).await;

    proxy.pass();
    let msg = reply_within(&mut sub, MARGIN).await;
    assert_eq!(
        msg,
        Reply::Array(vec![
            Reply::Bulk("message".into()),
            Reply::Bulk("ch".into()),
            Reply::Bulk("hello".into())
        ])
    );
}

#[tokio::test]
async fn reset_all_aborts_live_connections_only() {
    let (server, proxy) = setup().await;
    let mut a = RespConn::connect(proxy.addr()).await.unwrap();
    let mut b = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(
        a.cmd(&["CLIENT", "SETNAME", "via-proxy"]).await.unwrap(),
        "OK"
    );
    assert_eq!(b.cmd(&["PING"]).await.unwrap(), "PONG");
    // Even a black-holed connection with bytes in flight is reset.
    proxy.blackhole();
    b.send(&["PING"]).await.unwrap();

    proxy.reset_all().await;
    assert_eq!(proxy.connections(), 0);
    let mut buf = [0u8; 16];
    for conn in [&mut a, &mut b] {
        let err = conn.read_raw(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err:?}");
    }

    // The server side was reset too: its client is gone.
    let deadline = Instant::now() + MARGIN;
    loop {
        let clients = server.cmd(&["CLIENT", "LIST"]).await.unwrap();
        if !clients.as_str().unwrap().contains("via-proxy") {
            break;
        }
        server.check(
            Instant::now() < deadline,
            format!("server still has the client:\n{clients}"),
        );
        tokio::time::sleep(10 * MS).await;
    }

    // New connections are unaffected.
    proxy.pass();
    let mut c = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(c.cmd(&["PING"]).await.unwrap(), "PONG");
    assert_eq!(proxy.accepted(), 3);
}

#[tokio::test]
async fn refuse_resets_new_connections_only() {
    let (_server, proxy) = setup().await;
    let mut old = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(old.cmd(&["PING"]).await.unwrap(), "PONG");

    proxy.refuse(true);
    let mut new = RespConn::connect(proxy.addr()).await.unwrap();
    let err = new.cmd(&["PING"]).await.unwrap_err();
    assert!(is_reset_or_eof(&err), "{err:?}");
    assert_eq!(proxy.accepted(), 1);
    assert_eq!(old.cmd(&["PING"]).await.unwrap(), "PONG");

    proxy.refuse(false);
    let mut again = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(again.cmd(&["PING"]).await.unwrap(), "PONG");
    assert_eq!(proxy.accepted(), 2);
}

#[tokio::test]
async fn a_dead_upstream_resets_clients_instead_of_hanging() {
    let (mut server, proxy) = setup().await;
    let mut conn = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(conn.cmd(&["PING"]).await.unwrap(), "PONG");

    server.kill().await.unwrap();
    let err = tokio::time::timeout(MARGIN, conn.read_reply())
        .await
        .expect("client not told that the server died")
        .unwrap_err();
    assert!(is_reset_or_eof(&err), "{err:?}");
    let mut fresh = RespConn::connect(proxy.addr()).await.unwrap();
    let err = tokio::time::timeout(MARGIN, fresh.cmd(&["PING"]))
        .await
        .expect("connection to a dead upstream hung")
        .unwrap_err();
    assert!(is_reset_or_eof(&err), "{err:?}");

    server.start_again().await.unwrap();
    let mut back = RespConn::connect(proxy.addr()).await.unwrap();
    assert_eq!(back.cmd(&["PING"]).await.unwrap(), "PONG");
}

#[tokio::test]
async fn drop_stops_the_proxy() {
    let (_server, proxy) = setup().await;
    let addr = proxy.addr();
    let mut conn = RespConn::connect(addr).await.unwrap();
    assert_eq!(conn.cmd(&["PING"]).await.unwrap(), "PONG");
    drop(proxy);
    let err = tokio::time::timeout(MARGIN, conn.read_reply())
        .await
        .expect("connection survived the proxy")
        .unwrap_err();
    assert!(is_reset_or_eof(&err), "{err:?}");
    // The listener closes as the accept task is torn down.
    let deadline = Instant::now() + MARGIN;
    loop {
        match RespConn::connect(addr).await {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
            other => assert!(
                Instant::now() < deadline,
                "proxy still accepting: {other:?}"
            ),
        }
        tokio::time::sleep(5 * MS).await;
    }
}

#[tokio::test]
async fn one_connection_can_be_blackholed_alone() {
    let (_server, proxy) = setup().await;
    let mut first = RespConn::connect(proxy.addr()).await.unwrap();
    ping_rtt(&mut first).await;
    let mut second = RespConn::connect(proxy.addr()).await.unwrap();
    ping_rtt(&mut second).await;
    let ids = proxy.connection_ids();
    assert_eq!(ids.len(), 2);
    assert!(proxy.set_connection_mode(ids[0], Some(Mode::Blackhole)));
    first.send(&["PING"]).await.unwrap();
    assert_held(&mut first).await;
    // The other connection, and new ones, are not affected.
    ping_rtt(&mut second).await;
    let mut third = RespConn::connect(proxy.addr()).await.unwrap();
    ping_rtt(&mut third).await;
    // Back to the proxy's mode: the held PING is answered.
    assert!(proxy.set_connection_mode(ids[0], None));
    let reply = reply_within(&mut first, Duration::from_secs(1)).await;
    assert_eq!(reply.as_str(), Some("PONG"));
    // A proxy-wide blackhole still reaches a connection without an override.
    proxy.blackhole();
    second.send(&["PING"]).await.unwrap();
    assert_held(&mut second).await;
    // …but not one whose override says pass.
    assert!(proxy.set_connection_mode(ids[0], Some(Mode::Pass)));
    ping_rtt(&mut first).await;
    drop(first);
    proxy.pass();
    proxy
        .wait_connections(2, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!proxy.set_connection_mode(ids[0], Some(Mode::Blackhole)));
}

#[tokio::test]
async fn a_trip_wire_blackholes_the_command_that_carries_its_pattern() {
    let (server, proxy) = setup().await;
    let mut conn = RespConn::connect(proxy.addr()).await.unwrap();
    proxy.blackhole_on_send("tripwire-key");
    // Before the pattern: forwarded as usual.
    conn.cmd(&["SET", "before", "1"])
        .await
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(proxy.tripped(), 0);
    assert_eq!(proxy.mode(), Mode::Pass);
    // The command with the pattern does not reach the server, nor anything after it.
    conn.send(&["SET", "tripwire-key", "1"]).await.unwrap();
    proxy.wait_tripped(1, MARGIN).await.unwrap();
    assert_eq!(proxy.mode(), Mode::Blackhole);
    assert_held(&mut conn).await;
    assert_eq!(server.cmd(&["EXISTS", "tripwire-key"]).await.unwrap(), 0);
    // Healed: held bytes go through, and the wire went off once only.
    proxy.pass();
    assert_eq!(reply_within(&mut conn, MARGIN).await, "OK");
    conn.cmd(&["SET", "tripwire-key", "2"])
        .await
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(proxy.mode(), Mode::Pass);
    assert_eq!(proxy.tripped(), 1);
}
