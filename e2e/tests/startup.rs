//! The `startup` example against a real `redis-server` (started here) and
//! the real PostgreSQL of the machine (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`; CI's `.ci/run` starts one when
//! none answers): one instance runs the schema change, is killed mid-way,
//! another finishes it under a greater token, everyone serves after it, and
//! the restarted instance runs nothing. Without PostgreSQL this test fails
//! with a message saying so; it never passes silently.

#[allow(dead_code)] // `main` is the example's, unused here
#[path = "../../examples/startup.rs"]
mod startup;

use leader_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_migrates_a_killed_runner_is_replaced_and_everyone_serves_after() {
    let redis = RedisServer::start().await.unwrap();
    let database_url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| startup::DEFAULT_DATABASE_URL.to_owned());
    let mut lines = Vec::new();
    let report = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        startup::run(&redis.url(), &database_url, |l| lines.push(l)),
    )
    .await
    .expect("the demo ends within a minute")
    .unwrap_or_else(|e| {
        panic!(
            "this test needs PostgreSQL (DATABASE_URL or {}; `bash .ci/run` starts one): {e}",
            startup::DEFAULT_DATABASE_URL
        )
    });
    let output = lines.join("\n");
    assert!(report.ok(), "{report:?}\n{output}");
    assert!(output.contains("is killed mid-way"), "{output}");
    assert!(output.contains("takes over and runs it again"), "{output}");
    assert!(
        output.contains("restarts: schema ready at once (ran here: false)"),
        "{output}"
    );
    println!("{output}");
}
