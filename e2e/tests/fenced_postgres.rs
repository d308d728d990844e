//! The `fenced_postgres` example against the real PostgreSQL of the machine
//! (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`; CI's
//! `.ci/run` starts one when none answers): the deposed leader's late write
//! is refused by the conditional write. Without PostgreSQL this test fails
//! with a message saying so; it never passes silently.

#[allow(dead_code)] // `main` is the example's, unused here
#[path = "../../examples/fenced_postgres.rs"]
mod fenced_postgres;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_late_sql_write_is_refused() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| fenced_postgres::DEFAULT_DATABASE_URL.to_owned());
    let mut lines = Vec::new();
    let report = fenced_postgres::run(&url, |l| lines.push(l))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "this test needs PostgreSQL (DATABASE_URL or {}; `bash .ci/run` starts one): {e}",
                fenced_postgres::DEFAULT_DATABASE_URL
            )
        });
    let output = lines.join("\n");
    assert!(!report.late_write_applied, "{output}");
    assert!(report.ok(), "{report:?}\n{output}");
    assert!(
        output.contains("refused: a newer leader wrote the row"),
        "{output}"
    );
}
