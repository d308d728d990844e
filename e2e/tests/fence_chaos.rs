//! The fencing proof, as processes: a leader's writer is frozen (SIGSTOP) or
//! cut off from Redis (a black-holing proxy) in the middle of its gated
//! body, after the body was admitted; another instance is elected and
//! writes; then the old writer resumes and writes at once, with its old
//! token, four ways:
//!
//! | write | expected |
//! | --- | --- |
//! | Redis, through the fence (`Fence::set`) | refused (`Stale`, mark = the successor's token) |
//! | Redis, a plain `SET` | applied: it overwrites the successor's value |
//! | PostgreSQL, `UPDATE … WHERE fence <= $token` | refused (0 rows) |
//! | PostgreSQL, a plain `UPDATE` | applied: it overwrites the successor's row |
//!
//! So each test asserts 0 stale writes applied through the fence and 2
//! applied without it: the unfenced writes show that the scenario really
//! produces a stale writer (without the fence the test fails).
//!
//! The writer processes are this test binary itself, run again with
//! `--ignored --exact writer_process` and `FENCE_WRITER_*` variables: the
//! `leader-instance` binary cannot use sqlx (a dev-dependency). A writer
//! leads through its own fault proxy, prints `@ready`, `@begin <token>`
//! when a gated body starts, then waits for a `write` line on stdin, writes,
//! and prints `@wrote <token> <redis fenced> <redis plain> <pg fenced>
//! <pg plain>` (each `applied`, `stale:<mark>` or `error:<message>`).
//!
//! Needs PostgreSQL (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`); fails saying so without it.

use std::sync::Arc;
use std::time::Duration;

use leader_runtime::{Config, Fenced, Runtime};
use leader_testkit::{ChildProcess, FaultProxy, RedisServer, RespConn};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::{mpsc, Mutex};

const TTL: Duration = Duration::from_millis(1000);
const GROUP: &str = "fenced";
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Long enough for an election on a busy machine; never a synchronisation.
const WAIT: Duration = Duration::from_secs(15);

static SERIAL: Mutex<()> = Mutex::const_new(());

fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

async fn pg() -> PgPool {
    let url = database_url();
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!("this test needs PostgreSQL at {url} (set DATABASE_URL; `bash .ci/run` starts one): {e}")
        })
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGSTOP the writer's process; SIGCONT to resume.
    Stop,
    /// Black-hole the writer's connection to Redis; pass to heal.
    Partition,
}

/// One writer process behind its own proxy.
struct Writer {
    name: &'static str,
    proxy: FaultProxy,
    child: ChildProcess,
}

impl Writer {
    async fn start(name: &'static str, server: &RedisServer, table: &str) -> Writer {
        let proxy = FaultProxy::start(server.addr()).await.unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "--exact",
            "writer_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FENCE_WRITER_REDIS", proxy.url())
        .env("FENCE_WRITER_ADDR", proxy.addr().to_string())
        .env("FENCE_WRITER_ID", name)
        .env("FENCE_WRITER_TABLE", table)
        .env("DATABASE_URL", database_url())
        .env("RUST_LOG", "leader_runtime=info");
        let child = ChildProcess::spawn(cmd).unwrap();
        let writer = Writer { name, proxy, child };
        writer.line(|l| l == "ready").await;
        writer
    }

    /// The first `@` line (from the start) that `pred` accepts, without its `@`.
    async fn line(&self, mut pred: impl FnMut(&str) -> bool) -> String {
        let found = self
            .child
            .stdout()
            .wait_for(|l| l.strip_prefix('@').is_some_and(&mut pred), WAIT)
            .await;
        match found {
            Ok(line) => line[1..].to_owned(),
            Err(e) => panic!(
                "{}: {e}\nstderr:\n{}",
                self.name,
                self.child.stderr().snapshot().join("\n")
            ),
        }
    }

    /// The `n`-th body begun (0-based): the index of its line, its token.
    async fn begun(&self, n: usize) -> (usize, u64) {
        let mut from = 0;
        let mut line = String::new();
        for _ in 0..=n {
            let (i, found) = self
                .child
                .stdout()
                .wait_for_from(from, |l| l.starts_with("@begin "), WAIT)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", self.name));
            (from, line) = (i + 1, found);
        }
        (from, line["@begin ".len()..].parse().unwrap())
    }

    async fn command(&mut self, text: &str) {
        let stdin = self.child.stdin().as_mut().unwrap();
        stdin
            .write_all(format!("{text}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    /// The outcome of the write of the body with `token` begun at line `from`.
    async fn wrote(&self, (from, token): (usize, u64)) -> Vec<String> {
        let prefix = format!("@wrote {token} ");
        let (_, line) = self
            .child
            .stdout()
            .wait_for_from(from, |l| l.starts_with(&prefix), WAIT)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        line[prefix.len()..].split(' ').map(str::to_owned).collect()
    }
}

async fn redis_get(server: &RedisServer, key: &str) -> Option<String> {
    server
        .cmd(&["GET", key])
        .await
        .unwrap()
        .as_str()
        .map(str::to_owned)
}

async fn pg_row(pool: &PgPool, table: &str, name: &str) -> (String, i64) {
    sqlx::query_as(&format!("SELECT value, fence FROM {table} WHERE name = $1"))
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn stale_writer_is_locked_out(fault: Fault) {
    let _serial = SERIAL.lock().await;
    let pool = pg().await;
    let table = format!("leader_fence_chaos_{}_{fault:?}", std::process::id()).to_lowercase();
    sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!(
        "CREATE TABLE {table} (name text PRIMARY KEY, value text NOT NULL, fence bigint NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {table} VALUES ('fenced', '', 0), ('plain', '', 0)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let server = RedisServer::start().await.unwrap();

    // a leads; its first body writes everything (the fence lets the
    // current leader through).
    let mut a = Writer::start("a", &server, &table).await;
    let first = a.begun(0).await;
    a.command("write").await;
    assert_eq!(a.wrote(first).await, ["applied"; 4], "a's first write");
    let mut b = Writer::start("b", &server, &table).await;

    // a's next body has begun (admitted under a's lease): freeze or cut it
    // off there, before its write.
    let body_a = a.begun(1).await;
    let token_a = body_a.1;
    assert_eq!(token_a, first.1, "still a's first leadership");
    match fault {
        Fault::Stop => a.child.pause().unwrap(),
        Fault::Partition => a.proxy.blackhole(),
    }

    // b is elected and writes.
    let body_b = b.begun(0).await;
    let token_b = body_b.1;
    assert!(token_b > token_a);
    b.command("write").await;
    assert_eq!(b.wrote(body_b).await, ["applied"; 4], "b's write");
    let b_value = format!("b:{token_b}");

    // a resumes and writes at once with its old token.
    match fault {
        Fault::Stop => {
            a.command("write").await; // read the moment it runs again
            a.child.resume().unwrap();
        }
        Fault::Partition => {
            a.proxy.pass();
            a.command("write").await;
        }
    }
    let outcome = a.wrote(body_a).await;
    let stale = format!("stale:{token_b}");
    let a_value = format!("a:{token_a}");

    // Through the fence: refused, b's values stand.
    assert_eq!(outcome[0], stale, "redis, fenced: {outcome:?}");
    assert_eq!(outcome[2], "stale", "postgres, fenced: {outcome:?}");
    assert_eq!(
        redis_get(&server, "leader:{fenced}:state").await,
        Some(b_value.clone())
    );
    assert_eq!(
        pg_row(&pool, &table, "fenced").await,
        (b_value.clone(), token_b as i64)
    );
    // Without it: the stale writes are applied over b's.
    assert_eq!(outcome[1], "applied", "redis, plain: {outcome:?}");
    assert_eq!(outcome[3], "applied", "postgres, plain: {outcome:?}");
    assert_eq!(
        redis_get(&server, "leader:{fenced}:plain").await,
        Some(a_value.clone())
    );
    assert_eq!(pg_row(&pool, &table, "plain").await.0, a_value);
    let fenced_applied = [&outcome[0], &outcome[2]]
        .iter()
        .filter(|o| **o == "applied")
        .count();
    let plain_applied = [&outcome[1], &outcome[3]]
        .iter()
        .filter(|o| **o == "applied")
        .count();
    eprintln!("{fault:?}: stale writes applied: {fenced_applied} through the fence, {plain_applied} without it");
    assert_eq!((fenced_applied, plain_applied), (0, 2));

    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&pool)
        .await
        .unwrap();
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_leaders_writes_are_refused_when_it_resumes() {
    stale_writer_is_locked_out(Fault::Stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leaders_writes_are_refused_when_it_reconnects() {
    stale_writer_is_locked_out(Fault::Partition).await;
}

/// What a write reported, in one word.
fn outcome<T>(written: Result<Fenced<T>, impl std::fmt::Display>) -> String {
    match written {
        Ok(Fenced::Applied(_)) => "applied".to_owned(),
        Ok(Fenced::Stale { mark, .. }) => format!("stale:{}", mark.unwrap_or(0)),
        Err(e) => format!("error:{}", e.to_string().replace(' ', "_")),
    }
}

/// A writer process of the tests above (they start it; alone it does nothing).
#[tokio::test(flavor = "current_thread")]
#[ignore = "the writer process of the fencing proof (started by the tests above)"]
async fn writer_process() {
    let Ok(url) = std::env::var("FENCE_WRITER_REDIS") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    let (addr, id, table) = (
        var("FENCE_WRITER_ADDR"),
        var("FENCE_WRITER_ID"),
        var("FENCE_WRITER_TABLE"),
    );
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let rt = Runtime::new(
        Config::builder()
            .redis_url(url)
            .instance_id(id.clone())
            .ttl(TTL)
            .renew_interval(TTL / 3)
            .retry_interval(TTL / 10)
            .call_timeout(TTL * 6 / 10)
            .build()
            .unwrap(),
    )
    .unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&database_url())
        .await
        .unwrap();
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    // stdin on a thread of its own (tokio's `io-std` is not enabled here).
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let commands = Arc::new(Mutex::new(rx));
    // A line of its own: libtest left "test writer_process ... " open.
    println!("\n@ready");
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    loop {
        ticks.tick().await;
        let (commands, pool, addr, id, table) = (
            commands.clone(),
            pool.clone(),
            addr.clone(),
            id.clone(),
            table.clone(),
        );
        rt.run_if_leader(GROUP, || async move {
            let lease = leader_runtime::current_lease().unwrap();
            let token = lease.token();
            println!("@begin {token}");
            // The body's "work": wait for the test's go (a frozen or
            // cut-off leader is stopped right here).
            if commands.lock().await.recv().await.is_none() {
                std::process::exit(0); // the test went away
            }
            let value = format!("{id}:{token}");
            let fence = lease.fence();
            let redis_fenced = outcome(fence.set(fence.key("state"), &value).await);
            let redis_plain = match RespConn::connect(&addr).await {
                Ok(mut conn) => match conn.cmd(&["SET", "leader:{fenced}:plain", &value]).await {
                    Ok(r) if r == "OK" => "applied".to_owned(),
                    other => format!("error:{other:?}").replace(' ', "_"),
                },
                Err(e) => format!("error:{e}").replace(' ', "_"),
            };
            let pg_fenced = sqlx::query(&format!(
                "UPDATE {table} SET value = $1, fence = $2 WHERE name = 'fenced' AND fence <= $2"
            ))
            .bind(&value)
            .bind(i64::try_from(token).unwrap())
            .execute(&pool)
            .await;
            let pg_fenced = match pg_fenced {
                Ok(done) if done.rows_affected() == 1 => "applied".to_owned(),
                Ok(_) => "stale".to_owned(),
                Err(e) => format!("error:{e}").replace(' ', "_"),
            };
            let pg_plain = sqlx::query(&format!(
                "UPDATE {table} SET value = $1 WHERE name = 'plain'"
            ))
            .bind(&value)
            .execute(&pool)
            .await;
            let pg_plain = match pg_plain {
                Ok(done) if done.rows_affected() == 1 => "applied".to_owned(),
                Ok(_) => "none".to_owned(),
                Err(e) => format!("error:{e}").replace(' ', "_"),
            };
            println!("@wrote {token} {redis_fenced} {redis_plain} {pg_fenced} {pg_plain}");
        })
        .await;
    }
}
