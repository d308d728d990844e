//! The redis-server harness against the real binary.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use leader_testkit::{process_state, Persisted, RedisServer, Reply, RespConn};

const SHORT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn starts_on_its_own_port_and_answers() {
    let server = RedisServer::start().await.unwrap();
    assert_ne!(server.port(), 6379);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(
        server.addr().to_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert_eq!(server.cmd(&["PING"]).await.unwrap(), "PONG");
    assert_eq!(server.cmd(&["SET", "k", "v"]).await.unwrap(), "OK");
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), "v");

    let info = server.cmd(&["INFO", "server"]).await.unwrap();
    let info = info.as_str().unwrap();
    assert!(
        info.contains(&format!("tcp_port:{}", server.port())),
        "{info}"
    );
    assert!(
        info.contains(&format!("process_id:{}", server.pid().unwrap())),
        "{info}"
    );

    // No persistence configured.
    let save = server.cmd(&["CONFIG", "GET", "save"]).await.unwrap();
    assert_eq!(
        save,
        Reply::Array(vec![Reply::Bulk("save".into()), Reply::Bulk(String::new())])
    );
    let aof = server.cmd(&["CONFIG", "GET", "appendonly"]).await.unwrap();
    assert_eq!(
        aof,
        Reply::Array(vec![
            Reply::Bulk("appendonly".into()),
            Reply::Bulk("no".into())
        ])
    );

    assert!(
        server.log().contains("Ready to accept connections"),
        "{}",
        server.report()
    );
}

#[tokio::test]
async fn two_servers_are_independent() {
    let (a, b) = tokio::try_join!(RedisServer::start(), RedisServer::start()).unwrap();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    a.cmd(&["SET", "k", "a"]).await.unwrap();
    assert!(b.cmd(&["GET", "k"]).await.unwrap().is_nil());
}

#[tokio::test]
async fn kill_then_restart_on_the_same_port_with_empty_data_and_scripts() {
    let mut server = RedisServer::start().await.unwrap();
    let port = server.port();
    let old_pid = server.pid().unwrap();
    server.cmd(&["SET", "k", "v"]).await.unwrap();
    let sha = server.cmd(&["SCRIPT", "LOAD", "return 1"]).await.unwrap();
    let sha = sha.as_str().unwrap().to_owned();
    // A connection that is open across the kill (its socket lingers in the kernel).
    let mut open = server.connect().await.unwrap();
    assert_eq!(open.cmd(&["PING"]).await.unwrap(), "PONG");

    server.kill().await.unwrap();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert_eq!(process_state(old_pid), None, "killed process still exists");
    let err = open.cmd(&["PING"]).await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
        ),
        "{err:?}"
    );
    let refused = RespConn::connect(server.addr()).await.unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
    server.kill().await.unwrap(); // no-op when not running

    server.start_again().await.unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(old_pid));
    assert!(server.cmd(&["GET", "k"]).await.unwrap().is_nil());
    assert_eq!(
        server.cmd(&["SCRIPT", "EXISTS", &sha]).await.unwrap(),
        Reply::Array(vec![Reply::Integer(0)])
    );

    // restart() = kill + start_again, straight away while clients are connected.
    let mut open = server.connect().await.unwrap();
    server.cmd(&["SET", "k2", "v"]).await.unwrap();
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    assert!(server.cmd(&["GET", "k2"]).await.unwrap().is_nil());
    assert!(open.cmd(&["PING"]).await.is_err());
    // Both starts appear in the one log.
    assert_eq!(
        server.log().matches("Ready to accept connections").count(),
        3,
        "{}",
        server.report()
    );
}

#[tokio::test]
async fn restart_from_the_rdb_snapshot_loads_the_older_data() {
    let mut server = RedisServer::start().await.unwrap();
    let run_id = server
        .info_field("server", "run_id")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run_id.len(), 40, "{run_id}");
    // Nothing to load before a SAVE.
    let mut no_dump = RedisServer::start().await.unwrap();
    let err = no_dump.restart_from(Persisted::Rdb).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");

    server.cmd(&["SET", "k", "old"]).await.unwrap();
    server
        .cmd(&["SET", "gone", "x", "PX", "200"])
        .await
        .unwrap();
    server.cmd(&["SAVE"]).await.unwrap().ok().unwrap();
    server.cmd(&["SET", "k", "new"]).await.unwrap();
    server.cmd(&["SET", "later", "v"]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await; // `gone` expires
    let port = server.port();
    server.restart_from(Persisted::Rdb).await.unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(server.cmd(&["GET", "k"]).await.unwrap(), "old");
    assert!(server.cmd(&["GET", "later"]).await.unwrap().is_nil());
    assert!(server.cmd(&["GET", "gone"]).await.unwrap().is_nil());
    let new_run_id = server
        .info_field("server", "run_id")
        .await
        .unwrap()
        .unwrap();
    assert_ne!(new_run_id, run_id);
    assert!(
        server.log().contains("DB loaded from disk"),
        "{}",
        server.report()
    );
    // An empty restart afterwards deletes the snapshot.
    server.restart().await.unwrap();
    assert!(server.cmd(&["GET", "k"]).await.unwrap().is_nil());
    assert!(!server.dir().join("dump.rdb").exists());
}

#[tokio::test]
async fn restart_from_the_aof_replays_it_and_a_cut_tail_is_lost() {
    // `appendfsync always` (kept across restarts: a builder argument): each
    // write reaches the file before its reply. With the default `everysec`,
    // Redis postpones the write (up to 2 s, replying anyway) while a
    // background fsync is slow, as on a disk busy with a parallel build, so
    // the file need not have grown when a reply came.
    let mut server = RedisServer::builder()
        .arg("--appendfsync")
        .arg("always")
        .start()
        .await
        .unwrap();
    server
        .cmd(&["CONFIG", "SET", "appendonly", "yes"])
        .await
        .unwrap()
        .ok()
        .unwrap();
    // Turning the AOF on writes its base file in the background.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rewriting = server
            .info_field("persistence", "aof_rewrite_in_progress")
            .await
            .unwrap();
        let scheduled = server
            .info_field("persistence", "aof_rewrite_scheduled")
            .await
            .unwrap();
        if rewriting.as_deref() == Some("0") && scheduled.as_deref() == Some("0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no AOF base file");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.cmd(&["SET", "a", "1"]).await.unwrap();
    let incr = server.aof_incr_file().unwrap();
    let kept = std::fs::metadata(&incr).unwrap().len();
    assert!(kept > 0, "{}", incr.display());
    server.cmd(&["SET", "b", "2"]).await.unwrap();
    server.kill().await.unwrap();
    // Everything acknowledged reached the file (kill -9 loses no write()).
    assert!(std::fs::metadata(&incr).unwrap().len() > kept);
    server.start_again_from(Persisted::Aof).await.unwrap();
    assert_eq!(server.cmd(&["GET", "a"]).await.unwrap(), "1");
    assert_eq!(server.cmd(&["GET", "b"]).await.unwrap(), "2");

    // Cut the tail written after `a` (what a host crash loses).
    server.cmd(&["SET", "c", "3"]).await.unwrap();
    let incr = server.aof_incr_file().unwrap();
    let kept = std::fs::metadata(&incr).unwrap().len();
    server.cmd(&["SET", "d", "4"]).await.unwrap();
    server.kill().await.unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&incr)
        .unwrap()
        .set_len(kept)
        .unwrap();
    server.start_again_from(Persisted::Aof).await.unwrap();
    assert_eq!(server.cmd(&["GET", "c"]).await.unwrap(), "3");
    assert!(server.cmd(&["GET", "d"]).await.unwrap().is_nil());
    assert!(
        server.log().contains("DB loaded from append only file"),
        "{}",
        server.report()
    );
    // An empty start deletes the AOF even though the AOF was on.
    server.restart().await.unwrap();
    assert!(server.cmd(&["GET", "a"]).await.unwrap().is_nil());
    assert!(!server.dir().join("appendonlydir").exists());
}

#[tokio::test]
async fn start_again_refuses_while_running() {
    let mut server = RedisServer::start().await.unwrap();
    let err = server.start_again().await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(server.cmd(&["PING"]).await.unwrap(), "PONG");
}

#[tokio::test]
async fn stop_is_graceful_and_start_again_works() {
    let mut server = RedisServer::start().await.unwrap();
    server.stop().await.unwrap();
    assert!(!server.is_running());
    assert!(
        server.log().contains("ready to exit, bye bye"),
        "{}",
        server.report()
    );
    assert!(RespConn::connect(server.addr()).await.is_err());
    server.start_again().await.unwrap();
    assert_eq!(server.cmd(&["PING"]).await.unwrap(), "PONG");
}

#[tokio::test]
async fn pause_holds_replies_until_resume() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = server.connect().await.unwrap();
    server.pause().unwrap();
    assert_eq!(process_state(server.pid().unwrap()), Some('T'));

    conn.send(&["INCR", "n"]).await.unwrap();
    let held = tokio::time::timeout(SHORT, conn.read_reply()).await;
    assert!(held.is_err(), "a paused server answered: {held:?}");

    server.resume().unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), conn.read_reply())
        .await
        .expect("no reply after resume")
        .unwrap();
    assert_eq!(reply, 1);
}

#[tokio::test]
async fn stop_works_on_a_paused_server() {
    let mut server = RedisServer::start().await.unwrap();
    server.pause().unwrap();
    tokio::time::timeout(Duration::from_secs(5), server.stop())
        .await
        .expect("stop hung on a paused server")
        .unwrap();
    assert!(!server.is_running());
}

#[tokio::test]
async fn pause_on_a_killed_server_is_an_error() {
    let mut server = RedisServer::start().await.unwrap();
    server.kill().await.unwrap();
    assert_eq!(server.pause().unwrap_err().kind(), io::ErrorKind::NotFound);
    assert_eq!(server.resume().unwrap_err().kind(), io::ErrorKind::NotFound);
}

#[tokio::test]
async fn password_and_acl_users() {
    let server = RedisServer::builder()
        .password("s3cret")
        .acl_user("app", "apppw", "~app:* +@all")
        .start()
        .await
        .unwrap();
    let mut anon = RespConn::connect(server.addr()).await.unwrap();
    let denied = anon.cmd(&["GET", "x"]).await.unwrap();
    assert!(
        matches!(&denied, Reply::Error(e) if e.starts_with("NOAUTH")),
        "{denied}"
    );

    // cmd() authenticates as the default user.
    assert_eq!(server.cmd(&["SET", "x", "1"]).await.unwrap(), "OK");

    let mut app = RespConn::connect(server.addr()).await.unwrap();
    assert_eq!(app.cmd(&["AUTH", "app", "apppw"]).await.unwrap(), "OK");
    assert_eq!(app.cmd(&["SET", "app:k", "v"]).await.unwrap(), "OK");
    let outside = app.cmd(&["SET", "other", "v"]).await.unwrap();
    assert!(
        matches!(&outside, Reply::Error(e) if e.starts_with("NOPERM")),
        "{outside}"
    );
    let wrong = RespConn::connect(server.addr())
        .await
        .unwrap()
        .cmd(&["AUTH", "app", "nope"])
        .await
        .unwrap();
    assert!(wrong.is_error(), "{wrong}");
}

#[tokio::test]
async fn extra_args_reach_the_server() {
    let server = RedisServer::builder()
        .args(["--maxclients", "77"])
        .start()
        .await
        .unwrap();
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "maxclients"]).await.unwrap(),
        Reply::Array(vec![
            Reply::Bulk("maxclients".into()),
            Reply::Bulk("77".into())
        ])
    );
}

#[tokio::test]
async fn a_bad_argument_fails_the_start_with_the_reason() {
    let err = RedisServer::builder()
        .arg("--no-such-option-here")
        .arg("1")
        .start()
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("exited during startup"), "{msg}");
    assert!(msg.contains("no-such-option-here"), "{msg}");
}

#[tokio::test]
async fn a_missing_binary_fails_the_start() {
    let err = RedisServer::builder()
        .binary("/nonexistent/redis-server")
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
}

#[tokio::test]
async fn check_panics_with_the_server_log() {
    let server = RedisServer::start().await.unwrap();
    server.check(true, "never shown");
    let panic = catch_unwind(AssertUnwindSafe(|| {
        server.check(1 + 1 == 3, "arithmetic is off")
    }))
    .expect_err("check(false) must panic");
    let msg = panic.downcast_ref::<String>().unwrap();
    assert!(msg.starts_with("arithmetic is off\n"), "{msg}");
    assert!(msg.contains(&format!("port {}", server.port())), "{msg}");
    assert!(msg.contains("Ready to accept connections"), "{msg}");
}

#[tokio::test]
async fn drop_kills_the_process_and_removes_the_dir() {
    let server = RedisServer::start().await.unwrap();
    let pid = server.pid().unwrap();
    let dir = server.dir().to_owned();
    let addr = server.addr();
    assert!(dir.join("redis.log").exists());
    drop(server);
    assert_eq!(process_state(pid), None);
    assert!(!dir.exists());
    assert!(RespConn::connect(addr).await.is_err());
}
