//! The `leader` binary as a process, against a real `redis-server` (one per
//! test) with instances running in this test process.

use std::process::Output;
use std::time::Duration;

use leader_runtime::{Config, ConfigBuilder, Runtime};
use leader_testkit::{ChildProcess, RedisServer};
use serde_json::Value;
use tokio::process::Command;
use tokio::time::{timeout, Instant};

const G: &str = "jobs";
const TTL: Duration = Duration::from_millis(1500);
const RENEW: Duration = Duration::from_millis(500);
const RETRY: Duration = Duration::from_millis(200);

/// Instance `id` on the connection `builder` names, with the tests' timings.
fn runtime(builder: ConfigBuilder, id: &str) -> Runtime {
    let config = builder
        .ttl(TTL)
        .renew_interval(RENEW)
        .retry_interval(RETRY)
        .instance_id(id)
        .build()
        .unwrap();
    Runtime::new(config).unwrap()
}

fn instance(server: &RedisServer, id: &str) -> Runtime {
    runtime(Config::builder().redis_url(server.url()), id)
}

/// `leader` with no connection settings from this environment.
fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leader"));
    for var in [
        "LEADER_REDIS_URL",
        "LEADER_REDIS_CLUSTER_URLS",
        "LEADER_REDIS_SENTINEL_MASTER",
        "LEADER_REDIS_SENTINEL_URLS",
        "REDIS_URL",
    ] {
        cmd.env_remove(var);
    }
    cmd.kill_on_drop(true);
    cmd
}

/// Run `leader --url <server> args…` to its end (at most 30 s).
async fn leader(server: &RedisServer, args: &[&str]) -> Output {
    let mut cmd = command();
    cmd.arg("--url").arg(server.url()).args(args);
    run(cmd).await
}

async fn run(mut cmd: Command) -> Output {
    timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("leader did not exit within 30 s")
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
}

/// Waits until `rt` leads `G` (the first election of a group waits one ttl).
async fn until_leader(rt: &Runtime) {
    let deadline = Instant::now() + TTL * 4;
    while !rt.is_leader(G) {
        assert!(Instant::now() < deadline, "{} never led", rt.instance_id());
        rt.run_if_leader(G, || async {}).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `a` leads `G`, `b` follows.
async fn fleet(server: &RedisServer) -> (Runtime, Runtime) {
    let (a, b) = (instance(server, "a"), instance(server, "b"));
    until_leader(&a).await;
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    (a, b)
}

async fn status_json(server: &RedisServer) -> Value {
    let out = leader(server, &["status", "--json"]).await;
    assert_exit(&out, 0);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

fn group<'v>(status: &'v Value, name: &str) -> &'v Value {
    status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == name)
        .unwrap_or_else(|| panic!("no {name} in {status:#}"))
}

#[tokio::test]
async fn status_shows_the_leader() {
    let server = RedisServer::start().await.unwrap();
    let (a, b) = fleet(&server).await;
    let token = a
        .run_if_leader(G, || async {
            leader_runtime::current_lease().unwrap().token()
        })
        .await
        .unwrap();

    let out = leader(&server, &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("jobs "))
        .unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..3], ["jobs", "a", &token.to_string()], "{text}");
    assert_eq!(cells.last(), Some(&"no"), "not paused: {text}");

    let status = status_json(&server).await;
    assert_eq!(status["prefix"], "leader");
    let jobs = group(&status, G);
    assert_eq!(jobs["holder"], "a");
    assert_eq!(jobs["token"], token);
    assert!(jobs["paused"].is_null());
    let left = jobs["expires_in_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= TTL.as_millis() as u64, "{left}");

    // A group whose keys are not what the runtime writes (a string at its
    // pause name, a set at its lease): listed, beside the others.
    server
        .cmd(&["SET", "leader:{stray}:paused", "x"])
        .await
        .unwrap();
    server
        .cmd(&["SADD", "leader:{broken}:lease", "x"])
        .await
        .unwrap();
    let out = leader(&server, &["status"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("\njobs "), "{text}");
    assert!(text.contains("not a pause mark"), "{text}");
    assert!(text.contains("cannot read all of it: "), "{text}");
    let status = status_json(&server).await;
    assert!(group(&status, "broken")["error"].is_string(), "{status:#}");
    assert!(group(&status, "stray")["paused"].is_object(), "{status:#}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn pause_hands_over_and_nobody_acquires_until_resume() {
    let server = RedisServer::start().await.unwrap();
    let (a, b) = fleet(&server).await;
    let out = leader(
        &server,
        &["pause", G, "--reason", "incident 42", "--by", "ops"],
    )
    .await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("nobody leads `jobs`"),
        "{}",
        stdout(&out)
    );
    assert!(!a.is_leader(G), "a handed over before the command returned");
    tokio::time::sleep(TTL * 2).await;
    assert!(
        !a.is_leader(G) && !b.is_leader(G),
        "nobody acquires while paused"
    );
    let status = status_json(&server).await;
    let jobs = group(&status, G);
    assert!(jobs["holder"].is_null(), "{jobs}");
    assert_eq!(jobs["paused"]["by"], "ops");
    assert_eq!(jobs["paused"]["reason"], "incident 42");
    let text = stdout(&leader(&server, &["status"]).await);
    assert!(text.contains("yes, by ops since"), "{text}");

    let out = leader(&server, &["resume", G]).await;
    assert_exit(&out, 0);
    assert_eq!(stdout(&out).trim(), "resumed `jobs`");
    timeout(TTL, async {
        while !a.is_leader(G) && !b.is_leader(G) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("nobody led after the resume");
    assert!(group(&status_json(&server).await, G)["paused"].is_null());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn step_down_moves_leadership() {
    let server = RedisServer::start().await.unwrap();
    let (a, b) = fleet(&server).await;
    let out = leader(&server, &["step-down", G]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("asked a to hand `jobs` over"), "{text}");
    // It waits for the next holder instead of reporting the gap between.
    assert!(text.contains("now led by b"), "{text}");
    timeout(TTL, async {
        while !b.is_leader(G) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("b did not take over");
    assert!(!a.is_leader(G));
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn step_down_of_a_group_nobody_holds_fails() {
    let server = RedisServer::start().await.unwrap();
    // Named (it has a token record), held by nobody.
    let a = instance(&server, "a");
    until_leader(&a).await;
    a.shutdown().await;
    let out = leader(&server, &["step-down", G]).await;
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(&format!("nobody holds `{G}`")),
        "{}",
        stderr(&out)
    );
    let out = leader(&server, &["step-down", "bad group"]).await;
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("invalid group"), "{}", stderr(&out));
}

/// A group (or job) no instance has named is a typo until proven otherwise:
/// every command on it exits 1 naming the groups (jobs) that exist, and
/// changes nothing; `pause --force` pauses it ahead of a deploy.
#[tokio::test]
async fn commands_on_a_group_or_job_nobody_named_exit_1_with_the_known_ones() {
    let server = RedisServer::start().await.unwrap();
    let a = instance(&server, "a");
    until_leader(&a).await;
    for args in [
        &["pause", "jbos"][..],
        &["resume", "jbos"],
        &["step-down", "jbos"],
        &["history", "jbos"],
        &["history", "jbos", "tick"],
    ] {
        let out = leader(&server, args).await;
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains("unknown group `jbos`") && err.contains(&format!("known: {G}")),
            "{args:?}: {err}"
        );
    }
    assert!(
        server
            .cmd(&["EXISTS", "leader:{jbos}:paused"])
            .await
            .unwrap()
            == 0,
        "a refused pause wrote nothing"
    );
    // A known group, an unknown job.
    let out = leader(&server, &["history", G, "tcik"]).await;
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("unknown job `tcik` of `jobs`")
            && stderr(&out).contains("known: none"),
        "{}",
        stderr(&out)
    );
    // Ahead of a deploy: forced, then known (resume finds it).
    let out = leader(&server, &["pause", "new-job", "--force", "--wait", "0"]).await;
    assert_exit(&out, 0);
    let out = leader(&server, &["resume", "new-job"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("resumed `new-job`"),
        "{}",
        stdout(&out)
    );
    a.shutdown().await;
}

#[tokio::test]
async fn history_and_status_show_cron_runs() {
    use tokio_cron_scheduler::JobScheduler;

    let server = RedisServer::start().await.unwrap();
    let a = instance(&server, "a");
    until_leader(&a).await;
    let scheduler = JobScheduler::new().await.unwrap();
    let job = leader_runtime::cron::JobBuilder::new("* * * * * *", G)
        .name("tick")
        .runtime(&a)
        .build(|_| async {})
        .unwrap();
    scheduler.add(job).await.unwrap();
    scheduler.start().await.unwrap();
    // Until a tick ran: with a ttl below the default tolerance (5 s), the
    // job's first claim on a fresh Redis refuses the first tolerance - ttl
    // seconds of ticks (recorded missed; see the cron guarantees).
    timeout(Duration::from_secs(15), async {
        while !a
            .cron_history(G, "tick")
            .await
            .unwrap()
            .iter()
            .any(|r| r.outcome == leader_runtime::cron::Outcome::Ok)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the job never ran");

    let out = leader(&server, &["history", G, "tick"]).await;
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert!(
        text.contains("  tick  ok  ran ") && text.contains("on a (token "),
        "{text}"
    );
    let out = leader(&server, &["history", G]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("  tick  ok  "), "{}", stdout(&out));
    let out = leader(&server, &["history", G, "--json"]).await;
    assert_exit(&out, 0);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["jobs"][0]["job"], "tick");
    assert_eq!(json["jobs"][0]["runs"][0]["outcome"], "ok");
    assert_eq!(json["jobs"][0]["runs"][0]["instance"], "a");

    let status = status_json(&server).await;
    let cron = &group(&status, G)["cron_jobs"][0];
    assert_eq!(cron["job"], "tick");
    assert_eq!(cron["last_runs"][0]["outcome"], "ok");
    assert!(stdout(&leader(&server, &["status"]).await).contains("    cron "));

    // A group that is named (its first call's acquisition wrote its token
    // record) but has no cron history.
    a.run_if_leader("other", || async {}).await;
    let out = leader(&server, &["history", "other"]).await;
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("no cron job of `other`"),
        "{}",
        stderr(&out)
    );
    scheduler.clone().shutdown().await.unwrap();
    a.shutdown().await;
}

/// Times no clock writes (stray writes to the keys): the tool shows what it
/// can, and does not crash (chrono panicked on them).
#[tokio::test]
async fn times_no_clock_writes_do_not_crash_the_tool() {
    let server = RedisServer::start().await.unwrap();
    for args in [
        &[
            "HSET",
            "leader:{jobs}:paused",
            "by",
            "ops",
            "at",
            "9000000000000000",
            "reason",
            "x",
        ][..],
        &[
            "RPUSH",
            "leader:{jobs}:cron-history:nightly",
            "99999999999999999\t1\t0\t0\tok\ti\t",
        ],
    ] {
        server.cmd(args).await.unwrap();
    }
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["history", G, "nightly"],
        &["history", G],
    ] {
        let out = leader(&server, args).await;
        assert_exit(&out, 0);
    }
    let text = stdout(&leader(&server, &["status"]).await);
    assert!(
        text.contains("yes, by ops since 1970-01-01T00:00:00.000Z: x"),
        "{text}"
    );
    let mut cmd = command();
    cmd.arg("--url").arg(server.url()).arg("watch");
    let watch = ChildProcess::spawn(cmd).unwrap();
    watch
        .stdout()
        .wait_for(
            |l| l.contains("jobs: paused by ops since"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn watch_prints_transitions_as_they_happen() {
    let server = RedisServer::start().await.unwrap();
    let (a, b) = fleet(&server).await;
    let mut cmd = command();
    cmd.arg("--url").arg(server.url()).arg("watch");
    let watch = ChildProcess::spawn(cmd).unwrap();
    let out = watch.stdout();
    let limit = Duration::from_secs(5);
    let (i, _) = out
        .wait_for_from(
            0,
            |l| l.ends_with("jobs: led by a (token ") || l.contains("jobs: led by a"),
            limit,
        )
        .await
        .unwrap();
    a.step_down(G).await.unwrap();
    let (i, _) = out
        .wait_for_from(i + 1, |l| l.contains("jobs: released by a"), limit)
        .await
        .unwrap();
    out.wait_for_from(i + 1, |l| l.contains("jobs: led by b"), limit)
        .await
        .unwrap();
    let paused = leader(&server, &["pause", G, "--wait", "0"]).await;
    assert_exit(&paused, 0);
    out.wait_for_from(i + 1, |l| l.contains("jobs: pause requested"), limit)
        .await
        .unwrap();
    out.wait_for_from(i + 1, |l| l.contains("jobs: paused by"), limit)
        .await
        .unwrap();
    out.wait_for_from(i + 1, |l| l.contains("jobs: no leader"), limit)
        .await
        .unwrap();
    // A group the watch did not list: its notice makes it read it at once
    // (the next listing of every group is 15 s away).
    let paused = leader(&server, &["pause", "fresh", "--force", "--wait", "0"]).await;
    assert_exit(&paused, 0);
    out.wait_for_from(i + 1, |l| l.contains("fresh: paused by"), limit)
        .await
        .unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_closed_output_pipe_ends_the_tool_quietly() {
    let server = RedisServer::start().await.unwrap();
    let (a, b) = fleet(&server).await;
    // `true` exits without reading: the tool's first line meets a closed pipe.
    let script = r#"set -o pipefail; "$0" --url "$1" status 2>"$2" | true"#;
    let dir = std::env::temp_dir().join(format!("leader-cli-epipe-{}", std::process::id()));
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_leader"))
        .arg(server.url())
        .arg(&dir);
    let out = run(cmd).await;
    let err = std::fs::read_to_string(&dir).unwrap_or_default();
    let _ = std::fs::remove_file(&dir);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_wrong_password_or_an_unreachable_server_exits_1_without_the_password() {
    let server = RedisServer::builder()
        .password("right-pw")
        .start()
        .await
        .unwrap();
    let wrong = format!("redis://:wr0ng-s3cret@127.0.0.1:{}", server.port());
    let mut cmd = command();
    cmd.args(["--url", &wrong, "status"]);
    let out = run(cmd).await;
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        !err.contains("wr0ng-s3cret") && !stdout(&out).contains("wr0ng-s3cret"),
        "{err}"
    );
    assert!(err.contains("redis://:***@127.0.0.1"), "{err}");
    assert!(err.contains("check the user and password"), "{err}");

    // Nothing listens on port 1.
    let mut cmd = command();
    cmd.env("LEADER_REDIS_URL", "redis://ops:unre4chable-pw@127.0.0.1:1")
        .args(["status", "--timeout", "0.5"]);
    let out = run(cmd).await;
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(!err.contains("unre4chable-pw"), "{err}");
    assert!(err.contains("redis://ops:***@127.0.0.1:1"), "{err}");

    let mut cmd = command();
    cmd.args(["--url", "http://ops:n0t-redis@host", "status"]);
    let out = run(cmd).await;
    assert_exit(&out, 1);
    assert!(!stderr(&out).contains("n0t-redis"), "{}", stderr(&out));
}

/// Passwords holding commas, spaces and `://`, in the cluster and sentinel
/// variables (which are cut at commas and spaces) and options: stderr never
/// shows a byte of them (marked Qk7, Jm5, Zr4). Nothing listens on ports 1
/// and 2.
#[tokio::test]
async fn a_password_with_separators_never_shows_on_stderr() {
    let marks = ["Qk7", "Jm5", "Zr4"];
    let cluster = "LEADER_REDIS_CLUSTER_URLS";
    let sentinels = "LEADER_REDIS_SENTINEL_URLS";
    // (environment, options)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 6] = [
        (
            &[(
                cluster,
                "redis://app:Qk7,Jm5 Zr4@127.0.0.1:1,redis://127.0.0.1:2",
            )],
            &[],
        ),
        (
            &[(
                cluster,
                "redis://app:Qk7,mid://Jm5@127.0.0.1:1, redis://127.0.0.1:2",
            )],
            &[],
        ),
        (&[(cluster, "redis://app:Qk7 redis://Zr4@127.0.0.1:1")], &[]),
        (
            &[
                ("LEADER_REDIS_SENTINEL_MASTER", "m"),
                (
                    sentinels,
                    "redis://:Qk7, Jm5@127.0.0.1:1 redis://127.0.0.1:2",
                ),
            ],
            &[],
        ),
        (
            &[],
            &[
                "--cluster-url",
                "redis://app:Qk7,Jm5 Zr4@127.0.0.1:1",
                "--cluster-url",
                "redis://127.0.0.1:2",
            ],
        ),
        (
            &[],
            &[
                "--sentinel-master",
                "m",
                "--sentinel-url",
                "redis://app:Qk7 ://Jm5@127.0.0.1:1",
            ],
        ),
    ];
    for (vars, args) in cases {
        let mut cmd = command();
        cmd.envs(vars.iter().copied())
            .args(args)
            .args(["status", "--timeout", "0.5"]);
        let out = run(cmd).await;
        assert_exit(&out, 1);
        let (err, shown) = (stderr(&out), stdout(&out));
        for mark in marks {
            assert!(
                !err.contains(mark) && !shown.contains(mark),
                "{vars:?} {args:?}: {mark} shown:\n{err}{shown}"
            );
        }
    }
}

#[tokio::test]
async fn usage_errors_exit_2_and_help_has_examples() {
    let out = run(command()).await;
    assert_exit(&out, 2);
    let mut cmd = command();
    cmd.arg("status");
    let out = run(cmd).await;
    assert_exit(&out, 2);
    assert!(
        stderr(&out).contains("no Redis to talk to"),
        "{}",
        stderr(&out)
    );
    let mut cmd = command();
    cmd.args(["--url", "redis://h", "--cluster-url", "redis://h", "status"]);
    assert_exit(&run(cmd).await, 2);
    // Durations that are not: usage errors, before any connection.
    for args in [
        &["--timeout", "-1", "status"][..],
        &["--timeout", "NaN", "status"],
        &["--timeout", "0", "status"],
        &["--timeout", "inf", "status"],
        &["pause", "g", "--wait", "-1"],
        &["step-down", "g", "--wait", "nan"],
        &["step-down", "g", "--wait", "1e300"],
        &["watch", "--interval", "10"],
        // Durations too long to mean anything (they overflowed `Instant`s
        // and `Duration` arithmetic).
        &["--timeout", "5e18", "status"],
        &["--timeout", "86401", "status"],
        &["--timeout", "21601", "status"],
        &["pause", "g", "--wait", "1e19"],
        &["step-down", "g", "--wait", "1e19"],
        &["step-down", "g", "--wait", "31536001"],
    ] {
        let mut cmd = command();
        cmd.args(["--url", "redis://127.0.0.1:1"]).args(args);
        let out = run(cmd).await;
        assert_exit(&out, 2);
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    // The longest allowed: no usage error (nothing listens on port 1).
    for args in [
        &["--timeout", "21600", "resume", "g"][..],
        &["--timeout", "0.5", "step-down", "g", "--wait", "31536000"],
        &["--timeout", "0.5", "pause", "g", "--wait", "31536000"],
    ] {
        let mut cmd = command();
        cmd.args(["--url", "redis://127.0.0.1:1"]).args(args);
        let out = run(cmd).await;
        assert_exit(&out, 1);
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        // Refused for the unreachable Redis, not by the library's rules.
        assert!(!stderr(&out).contains("invalid config"), "{}", stderr(&out));
    }
    let mut cmd = command();
    cmd.arg("--help");
    let out = run(cmd).await;
    assert_exit(&out, 0);
    let help = stdout(&out);
    for word in [
        "Examples:",
        "step-down",
        "pause",
        "resume",
        "history",
        "watch",
        "LEADER_REDIS_URL",
        "Exit status",
    ] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
}

#[tokio::test]
async fn the_documented_acl_user_for_the_tool_can_do_everything() {
    // DEPLOYING.md, "ACL user for the tool", without the connection set-up
    // commands (`client|setinfo` is unknown to Redis 7.0).
    let rules = "~leader:* &leader:released &leader:control +evalsha +eval +script|load +scan \
                 +get +pttl +type +hget +hmget +lrange +del +hset +publish +subscribe +ping";
    let server = RedisServer::builder()
        .acl_user("ops", "ops-pw", rules)
        .start()
        .await
        .unwrap();
    let (a, b) = fleet(&server).await;
    let url = format!("redis://ops:ops-pw@127.0.0.1:{}", server.port());
    for args in [
        &["status"][..],
        &["step-down", G],
        &["pause", G],
        &["resume", G],
    ] {
        let mut cmd = command();
        cmd.arg("--url").arg(&url).args(args);
        let out = run(cmd).await;
        assert_exit(&out, 0);
    }
    // No cron job has run: exit 1, for that reason and no other.
    let mut cmd = command();
    cmd.arg("--url").arg(&url).args(["history", G]);
    let out = run(cmd).await;
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("no cron job of"), "{}", stderr(&out));
    let denials = server.cmd(&["ACL", "LOG"]).await.unwrap();
    server.check(
        matches!(&denials, leader_testkit::Reply::Array(v) if v.is_empty()),
        format!("ACL denials: {denials:?}"),
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn status_and_pause_on_a_cluster_see_groups_on_every_master() {
    let cluster = leader_testkit::RedisCluster::start().await.unwrap();
    let urls = cluster.urls();
    // A group on each master.
    let mut groups: Vec<Option<String>> = vec![None; cluster.nodes().len()];
    for n in 0.. {
        let group = format!("job-{n}");
        let owner = cluster
            .master_of(&format!("leader:{{{group}}}:lease"))
            .await
            .unwrap();
        groups[owner].get_or_insert(group);
        if groups.iter().all(Option::is_some) {
            break;
        }
    }
    let groups: Vec<String> = groups.into_iter().map(Option::unwrap).collect();
    let a = runtime(Config::builder().redis_cluster_urls(urls.clone()), "a");
    for group in &groups {
        let deadline = Instant::now() + TTL * 4;
        while !a.is_leader(group) {
            assert!(Instant::now() < deadline, "a never led {group}");
            a.run_if_leader(group, || async {}).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let cluster_args = |args: &[&str]| {
        let mut cmd = command();
        for url in &urls {
            cmd.arg("--cluster-url").arg(url);
        }
        cmd.args(args);
        cmd
    };
    let out = run(cluster_args(&["status", "--json"])).await;
    assert_exit(&out, 0);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    for g in &groups {
        assert_eq!(group(&status, g)["holder"], "a", "{status:#}");
    }
    let out = run(cluster_args(&["pause", &groups[1]])).await;
    assert_exit(&out, 0);
    assert!(!a.is_leader(&groups[1]));
    assert!(a.is_leader(&groups[0]) && a.is_leader(&groups[2]));
    // A cron history on the last master: `history GROUP` finds its job by a
    // SCAN of that group's node, `status` by a SCAN of every master.
    let last = groups.len() - 1;
    let key = format!("leader:{{{}}}:cron-history:purge", groups[last]);
    cluster
        .node(last)
        .cmd(&["LPUSH", &key, "not a run"])
        .await
        .unwrap();
    let out = run(cluster_args(&["history", &groups[last]])).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("purge: no runs"), "{}", stdout(&out));
    let out = run(cluster_args(&["status", "--json"])).await;
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        group(&status, &groups[last])["cron_jobs"][0]["job"],
        "purge",
        "{status:#}"
    );
    a.shutdown().await;
}

/// Through Sentinel: `status` reads and `pause` / `resume` write the master
/// the sentinels name — also after a failover, when the old master is a
/// replica that refuses writes (so a tool still talking to it would fail).
#[tokio::test]
async fn status_and_pause_through_sentinel_follow_a_failover() {
    let deployment = leader_testkit::RedisSentinel::start().await.unwrap();
    let master = deployment.master_name().to_owned();
    let urls = deployment.sentinel_urls();
    let sentinel_args = |args: &[&str]| {
        let mut cmd = command();
        cmd.arg("--sentinel-master").arg(&master);
        for url in &urls {
            cmd.arg("--sentinel-url").arg(url);
        }
        cmd.args(args);
        cmd
    };
    let a = runtime(Config::builder().redis_sentinel(&master, urls.clone()), "a");
    until_leader(&a).await;
    let out = run(sentinel_args(&["status", "--json"])).await;
    assert_exit(&out, 0);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(group(&status, G)["holder"], "a", "{status:#}");

    let token = || {
        a.run_if_leader(G, || async {
            leader_runtime::current_lease().unwrap().token()
        })
    };
    let first = token().await.expect("a leads");
    let before = deployment.master().await.unwrap();
    let after = deployment.failover().await.unwrap();
    deployment.check(after != before, "the failover moved the master");
    // `a` leads again on the new master, under a new token (its record
    // there is not vouched for: one ttl; until then the view of its last
    // renewal on the old master may still hold), then the tool pauses the
    // group there.
    let deadline = Instant::now() + Duration::from_secs(30);
    while token().await.is_none_or(|t| t == first) {
        deployment.check(Instant::now() < deadline, "a never led after the failover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = run(sentinel_args(&["pause", G])).await;
    assert_exit(&out, 0);
    assert!(
        !a.is_leader(G),
        "a handed over on the new master: {}{}",
        stdout(&out),
        stderr(&out)
    );
    let paused = deployment
        .node(after)
        .cmd(&["EXISTS", &format!("leader:{{{G}}}:paused")])
        .await
        .unwrap();
    deployment.check(
        paused == leader_testkit::Reply::Integer(1),
        format!("the pause is on the new master: {paused:?}"),
    );
    let out = run(sentinel_args(&["status", "--json"])).await;
    assert_exit(&out, 0);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(group(&status, G)["paused"].is_object(), "{status:#}");
    let out = run(sentinel_args(&["resume", G])).await;
    assert_exit(&out, 0);
    a.shutdown().await;
}
