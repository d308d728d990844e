//! Fencing a SQL table: a leader that was deposed while it worked cannot
//! overwrite its successor's row, because every write carries the lease's
//! fencing token and PostgreSQL applies it only if no larger token wrote
//! the row before.
//!
//! ```text
//! cargo run --example fenced_postgres --features postgres
//! DATABASE_URL=postgres://user@host:5432/db cargo run --example fenced_postgres --features postgres
//! ```
//!
//! Needs a PostgreSQL (default `postgres://postgres@127.0.0.1:5432/test`);
//! the leases live in an in-memory backend (two instances in one process),
//! so no Redis is needed. With Redis the code is the same.
//!
//! The recipe: a `fence bigint` column next to the data, and every write of
//! a leader is conditional on it:
//!
//! ```sql
//! INSERT INTO jobs (name, state, fence) VALUES ($1, $2, $3)
//! ON CONFLICT (name) DO UPDATE SET state = excluded.state, fence = excluded.fence
//!     WHERE jobs.fence <= excluded.fence
//! ```
//!
//! (or `UPDATE jobs SET state = $2, fence = $3 WHERE name = $1 AND fence <= $3`
//! for rows that exist). One row affected: applied; none: a newer leader
//! wrote it — stop. Tokens fit a `bigint`: the library never issues one
//! above `i64::MAX`. For several statements, fence the transaction: update
//! one fence row per group first (`… WHERE fence <= $token`), which takes its
//! row lock until commit, and roll back when it affected no row.

use std::error::Error;

use leader_runtime::{Config, Event, Lease, MemoryBackend, Runtime};
use sqlx::postgres::{PgPool, PgPoolOptions};

/// The database when `DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The table of this demo.
pub const TABLE: &str = "leader_fenced_example";

/// What the demo saw.
#[derive(Debug)]
pub struct Report {
    pub first_token: u64,
    pub second_token: u64,
    /// Whether the deposed leader's late write was applied (it must not be).
    pub late_write_applied: bool,
    /// The row at the end: `(state, fence)`.
    pub row: (String, i64),
}

impl Report {
    pub fn ok(&self) -> bool {
        !self.late_write_applied
            && self.second_token > self.first_token
            && self.row == ("written by b".to_owned(), self.second_token as i64)
    }
}

/// Create the demo's table (a `fence` column next to the data).
pub async fn create_table(pool: &PgPool, table: &str) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (
             name  text PRIMARY KEY,
             state text NOT NULL,
             fence bigint NOT NULL
         )"
    ))
    .execute(pool)
    .await?;
    Ok(())
}

/// The fenced write: insert the row, or update it unless a larger token
/// wrote it before. Returns whether it was applied.
pub async fn fenced_upsert(
    pool: &PgPool,
    table: &str,
    lease: &Lease,
    name: &str,
    state: &str,
) -> Result<bool, Box<dyn Error + Send + Sync>> {
    // Tokens are at most i64::MAX: this never fails.
    let token = i64::try_from(lease.token())?;
    let done = sqlx::query(&format!(
        "INSERT INTO {table} (name, state, fence) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE SET state = excluded.state, fence = excluded.fence
             WHERE {table}.fence <= excluded.fence"
    ))
    .bind(name)
    .bind(state)
    .bind(token)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The leadership of `rt` in `group`, waiting (a few seconds at most) for
/// its election.
async fn lease_of(rt: &Runtime, group: &str) -> Option<Lease> {
    let mut events = rt.subscribe();
    let lease = || async {
        rt.run_if_leader(group, || async { leader_runtime::current_lease() })
            .await
            .flatten()
    };
    if let Some(lease) = lease().await {
        return Some(lease);
    }
    let elected = async {
        while let Ok(event) = events.recv().await {
            if matches!(event, Event::Elected { .. }) && event.group() == group {
                return lease().await;
            }
        }
        None
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), elected)
        .await
        .ok()
        .flatten()
}

/// The demo: `a` leads and starts a job; `a` is deposed mid-job (here: it
/// hands over, as if it had been paused past its lease); `b` leads and
/// writes; then `a`'s late write arrives — and is refused by PostgreSQL.
pub async fn run(
    database_url: &str,
    mut say: impl FnMut(String),
) -> Result<Report, Box<dyn Error + Send + Sync>> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(database_url)
        .await
        .map_err(|e| format!("cannot reach PostgreSQL at {database_url}: {e}"))?;
    create_table(&pool, TABLE).await?;
    let job = format!("nightly-{}", std::process::id());

    let shared = MemoryBackend::new();
    let instance = |id: &str| {
        Runtime::new(
            Config::builder()
                .memory(shared.clone())
                .instance_id(id)
                .build()?,
        )
    };
    let (a, b) = (instance("a")?, instance("b")?);

    let first = lease_of(&a, "reports").await.ok_or("a should lead")?;
    let applied = fenced_upsert(&pool, TABLE, &first, &job, "started by a").await?;
    say(format!(
        "a leads with token {}: write applied = {applied}",
        first.token()
    ));

    // a is deposed while its job still runs (a GC pause, a partition …).
    let _ = b.run_if_leader("reports", || async {}).await; // b campaigns
    a.shutdown().await;
    let second = lease_of(&b, "reports").await.ok_or("b should lead")?;
    let applied = fenced_upsert(&pool, TABLE, &second, &job, "written by b").await?;
    say(format!(
        "b leads with token {}: write applied = {applied}",
        second.token()
    ));

    // a resumes and finishes its job: its write carries the old token.
    let late = fenced_upsert(&pool, TABLE, &first, &job, "late write by a").await?;
    say(format!(
        "a's late write with token {}: applied = {late}{}",
        first.token(),
        if late {
            ""
        } else {
            " (refused: a newer leader wrote the row)"
        }
    ));

    let row: (String, i64) =
        sqlx::query_as(&format!("SELECT state, fence FROM {TABLE} WHERE name = $1"))
            .bind(&job)
            .fetch_one(&pool)
            .await?;
    say(format!("the row: state = {:?}, fence = {}", row.0, row.1));
    sqlx::query(&format!("DELETE FROM {TABLE} WHERE name = $1"))
        .bind(&job)
        .execute(&pool)
        .await?;
    b.shutdown().await;
    Ok(Report {
        first_token: first.token(),
        second_token: second.token(),
        late_write_applied: late,
        row,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
    let report = run(&url, |line| println!("{line}")).await?;
    if !report.ok() {
        return Err(format!("the demo did not behave as expected: {report:?}").into());
    }
    Ok(())
}
