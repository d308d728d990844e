//! Startup work: three instances start together, one runs a schema change
//! against PostgreSQL while the others wait, then all serve. The first
//! runner is killed mid-way; another finishes the change under a greater
//! fencing token, and the killed one, restarted, finds it done.
//!
//! ```text
//! cargo run --example startup --features postgres
//! LEADER_REDIS_URL=redis://host:6379 DATABASE_URL=postgres://user@host/db cargo run --example startup --features postgres
//! ```
//!
//! Needs a Redis (`LEADER_REDIS_URL`, or `REDIS_URL`; by default
//! `redis://127.0.0.1:6379`) and a PostgreSQL (`DATABASE_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/test`). Each run uses a name and
//! tables of its own, and drops its tables at the end.
//!
//! Every replica runs, at start-up and before serving:
//!
//! ```ignore
//! let done = runtime.once("migrate-accounts-locale", || async {
//!     let token = leader_runtime::current_lease().unwrap().token();
//!     // ... the schema change, fenced with `token` ...
//!     Ok::<_, sqlx::Error>("added column accounts.locale")
//! }).await?;
//! ```
//!
//! The change runs in one transaction that first raises a fence row to the
//! lease's token (`… WHERE fence <= $token`): a runner deposed mid-way (its
//! lease expired while it was stalled) cannot commit after its successor,
//! and PostgreSQL rolls back a killed runner's transaction.

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leader_runtime::{Config, Once, OnceRecord, Runtime};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::sync::mpsc;

type BoxError = Box<dyn Error + Send + Sync>;

/// The database when `DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The Redis when neither `LEADER_REDIS_URL` nor `REDIS_URL` is set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The lease length of the demo: a crashed runner is replaced within it.
const TTL: Duration = Duration::from_secs(2);

/// What the demo saw.
#[derive(Debug)]
pub struct Report {
    /// The instance whose runner was killed, and the token it ran under.
    pub killed: (String, u64),
    /// The record every instance got.
    pub record: OnceRecord,
    /// The instances that served, in the order they started serving.
    pub served: Vec<String>,
    /// Whether the column exists at the end.
    pub column_exists: bool,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.record.token > self.killed.1
            && self.record.instance_id != self.killed.0
            && self.record.attempts == 2
            && self.served.len() == 3
            && self.column_exists
    }
}

/// The schema change, fenced with `token`: one transaction that raises the
/// fence row first (its row lock is held until commit), then alters the
/// table. Returns the summary to record.
async fn migrate(
    pool: &PgPool,
    tables: &Tables,
    token: u64,
    stall: Duration,
) -> Result<String, BoxError> {
    let token = i64::try_from(token)?; // never above i64::MAX
    let mut tx = pool.begin().await?;
    let fenced = sqlx::query(&format!(
        "INSERT INTO {} (name, fence) VALUES ('schema', $1)
         ON CONFLICT (name) DO UPDATE SET fence = excluded.fence
             WHERE {}.fence <= excluded.fence",
        tables.fence, tables.fence
    ))
    .bind(token)
    .execute(&mut *tx)
    .await?;
    if fenced.rows_affected() == 0 {
        return Err("a newer runner fenced the schema: stopping".into());
    }
    sqlx::query(&format!(
        "ALTER TABLE {} ADD COLUMN IF NOT EXISTS locale text NOT NULL DEFAULT 'en'",
        tables.accounts
    ))
    .execute(&mut *tx)
    .await?;
    // A long backfill would run here; the first runner stalls (and is killed).
    tokio::time::sleep(stall).await;
    tx.commit().await?;
    Ok(format!("added column {}.locale", tables.accounts))
}

/// The demo's tables (their names carry the process id, so runs don't meet).
struct Tables {
    accounts: String,
    fence: String,
}

impl Tables {
    async fn create(pool: &PgPool) -> Result<Self, BoxError> {
        let id = std::process::id();
        let tables = Tables {
            accounts: format!("startup_example_accounts_{id}"),
            fence: format!("startup_example_fence_{id}"),
        };
        for sql in [
            format!(
                "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, email text NOT NULL)",
                tables.accounts
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, fence bigint NOT NULL)",
                tables.fence
            ),
        ] {
            sqlx::query(&sql).execute(pool).await?;
        }
        Ok(tables)
    }

    async fn drop_all(&self, pool: &PgPool) -> Result<(), BoxError> {
        sqlx::query(&format!(
            "DROP TABLE IF EXISTS {}, {}",
            self.accounts, self.fence
        ))
        .execute(pool)
        .await?;
        Ok(())
    }

    async fn has_locale(&self, pool: &PgPool) -> Result<bool, BoxError> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = $1 AND column_name = 'locale'",
        )
        .bind(&self.accounts)
        .fetch_one(pool)
        .await?;
        Ok(n == 1)
    }
}

/// One instance of the service: its runtime, on the shared Redis.
fn instance(redis_url: &str, id: &str) -> Result<Runtime, BoxError> {
    Ok(Runtime::new(
        Config::builder()
            .redis_url(redis_url)
            .ttl(TTL)
            .renew_interval(TTL / 4)
            .retry_interval(Duration::from_millis(250))
            .instance_id(id)
            .build()?,
    )?)
}

/// An instance's start-up: the schema change once fleet-wide, then serve.
/// `started` hears of each body that starts (instance, token).
async fn start_up(
    rt: Runtime,
    pool: PgPool,
    tables: Arc<Tables>,
    name: String,
    first: Arc<AtomicBool>,
    started: mpsc::UnboundedSender<(String, u64)>,
) -> Result<OnceRecord, leader_runtime::Error> {
    let id = rt.instance_id().to_owned();
    Once::new(name)
        .timeout(Duration::from_secs(60))
        .run_on(&rt, || async move {
            let token = leader_runtime::current_lease()
                .expect("runs under the lease")
                .token();
            let _ = started.send((id, token));
            // The first runner stalls mid-way, long enough to be killed.
            let stall = if first.swap(false, Ordering::SeqCst) {
                Duration::from_secs(60)
            } else {
                Duration::from_millis(100)
            };
            migrate(&pool, &tables, token, stall).await
        })
        .await
}

/// The demo; `say` gets each line to show.
pub async fn run(
    redis_url: &str,
    database_url: &str,
    mut say: impl FnMut(String),
) -> Result<Report, BoxError> {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(database_url)
        .await
        .map_err(|e| format!("cannot reach PostgreSQL at {database_url}: {e}"))?;
    let tables = Arc::new(Tables::create(&pool).await?);
    let name = format!("migrate-accounts-locale-{}", std::process::id());
    let first = Arc::new(AtomicBool::new(true));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (served_tx, mut served) = mpsc::unbounded_channel();

    say(format!(
        "a, b and c start together; each calls once({name:?}) before serving"
    ));
    let mut tasks = std::collections::HashMap::new();
    let launch = |id: &str| -> Result<_, BoxError> {
        let rt = instance(redis_url, id)?;
        let startup = start_up(
            rt.clone(),
            pool.clone(),
            tables.clone(),
            name.clone(),
            first.clone(),
            started_tx.clone(),
        );
        let served = served_tx.clone();
        let id = id.to_owned();
        let task = tokio::spawn(async move {
            let result = startup.await;
            if let Ok(record) = &result {
                let _ = served.send((id, record.clone()));
            }
            result
        });
        Ok((rt, task))
    };
    for id in ["a", "b", "c"] {
        tasks.insert(id.to_owned(), launch(id)?);
    }

    // The runner starts (on Redis, a new name's first election waits one ttl).
    let (runner, first_token) = started.recv().await.ok_or("no runner started")?;
    say(format!(
        "{runner} runs the schema change under token {first_token}; the others wait"
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (killed_rt, killed_task) = tasks.remove(&runner).ok_or("unknown runner")?;
    killed_task.abort();
    drop(killed_rt);
    say(format!(
        "{runner} is killed mid-way: its transaction rolls back, its lease is released"
    ));

    let (next, token) = started.recv().await.ok_or("nobody took over")?;
    say(format!(
        "{next} takes over and runs it again under token {token} (> {first_token})"
    ));
    let mut served_by = Vec::new();
    let mut record = None;
    for _ in 0..2 {
        let (id, r) = served.recv().await.ok_or("an instance did not start")?;
        say(format!(
            "{id}: schema ready ({:?}, by {} under token {}, attempt {}); serving",
            r.summary, r.instance_id, r.token, r.attempts
        ));
        served_by.push(id);
        record = Some(r);
    }
    let record = record.ok_or("no record")?;

    // The killed instance restarts: the record is there, nothing runs.
    tasks.insert(runner.clone(), launch(&runner)?);
    let (id, again) = served.recv().await.ok_or("the restart did not start")?;
    say(format!(
        "{id} restarts: schema ready at once (ran here: {}); serving",
        again.ran_here
    ));
    served_by.push(id);

    let column_exists = tables.has_locale(&pool).await?;
    for (_, (rt, task)) in tasks {
        task.await??;
        rt.shutdown().await;
    }
    tables.drop_all(&pool).await?;
    Ok(Report {
        killed: (runner, first_token),
        record,
        served: served_by,
        column_exists,
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let redis_url = std::env::var("LEADER_REDIS_URL")
        .or_else(|_| std::env::var("REDIS_URL"))
        .unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned());
    let database_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
    let report = run(&redis_url, &database_url, |line| println!("{line}")).await?;
    if !report.ok() {
        return Err(format!("the demo did not behave as expected: {report:?}").into());
    }
    Ok(())
}
