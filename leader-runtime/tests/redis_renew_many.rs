//! `renew_many.lua` on a real `redis-server`, called directly: one call
//! answers every kind of group as `renew.lua` answers it alone — renewed,
//! gone, held by another or under a newer leadership of ours (a renewal
//! names the token of the one it extends), a record this server does not
//! vouch for (none,
//! the first format, another run's, another type), paused, an error of its
//! own — with no pause key in the call (one `EXISTS` for all), with one
//! (each group's pause key checked on its own), and for an ACL user that
//! may not run `EXISTS` (the rules of earlier versions). A record the ACL
//! forbids reading is an error, in a renewal and in an acquisition, never
//! "not vouched for" or "no record" (which would issue a token without
//! reading the last one).

use leader_testkit::{RedisServer, Reply, RespConn};

mod support;
use support::{script_user, ACL_RULES};

const RECORD: &str = include_str!("../src/backend/scripts/record.lua");
const RENEW_MANY: &str = include_str!("../src/backend/scripts/renew_many.lua");
const RENEW_ONE: &str = include_str!("../src/backend/scripts/renew.lua");
const ACQUIRE_MANY: &str = include_str!("../src/backend/scripts/acquire_many.lua");

fn keys(group: &str) -> [String; 3] {
    [
        format!("leader:{{{group}}}:lease"),
        format!("leader:{{{group}}}:record"),
        format!("leader:{{{group}}}:paused"),
    ]
}

/// `record.lua` + `script` for `groups` as instance `me` (ttl 10 s), with
/// `more` arguments after those two (a renewal's tokens).
async fn call_with(conn: &mut RespConn, script: &str, groups: &[&str], more: &[String]) -> Reply {
    let script = format!("{RECORD}\n{script}");
    let mut keys: Vec<String> = groups.iter().flat_map(|g| keys(g)).collect();
    // The server marker (record.lua), last.
    keys.push("leader:server".to_owned());
    let count = keys.len().to_string();
    let mut args = vec!["EVAL", &script, &count];
    args.extend(keys.iter().map(String::as_str));
    args.extend(["me", "10000"]);
    args.extend(more.iter().map(String::as_str));
    conn.cmd(&args).await.unwrap()
}

async fn call(conn: &mut RespConn, script: &str, groups: &[&str]) -> Reply {
    call_with(conn, script, groups, &[]).await
}

/// A renewal of `groups` under the tokens they were won with (`tokens`,
/// from [`fixtures`]; "0" for a group not won).
async fn renew(conn: &mut RespConn, script: &str, groups: &[&str], tokens: &Tokens) -> Reply {
    let won: Vec<String> = groups
        .iter()
        .map(|g| tokens.get(g).cloned().unwrap_or_else(|| "0".to_owned()))
        .collect();
    call_with(conn, script, groups, &won).await
}

/// The token each group was won with.
type Tokens = std::collections::HashMap<&'static str, String>;

fn items(reply: Reply) -> Vec<Reply> {
    match reply {
        Reply::Array(items) => items,
        other => panic!("script replied {other:?}"),
    }
}

async fn cmd(conn: &mut RespConn, args: &[&str]) -> Reply {
    conn.cmd(args).await.unwrap()
}

/// The groups of [`fixtures`] and what `renew.lua` answers for each (the
/// paused one: 1 without its pause key).
const GROUPS: [(&str, i64); 9] = [
    ("ok", 1),
    ("gone", 0),
    ("theirs", -1),
    ("reclaimed", -1),
    ("norecord", -2),
    ("legacy", -2),
    ("other_run", -2),
    ("listed", -2),
    ("paused", -3),
];

/// Leases held by `me`: `ok` (vouched), `norecord` (record deleted),
/// `legacy` (record in the first format: a string), `other_run` (record
/// of another server run), `listed` (record of another type), `paused`
/// (vouched, paused when `pause`), `reclaimed` (won again by our own
/// acquire, sent earlier and run late: a newer leadership of ours); `gone`
/// has no lease, `theirs` is held by another instance, `wrong` has a lease
/// key of another type. Returns the token each of ours was won with.
async fn fixtures(conn: &mut RespConn, pause: bool) -> Tokens {
    let mine = [
        "ok",
        "norecord",
        "legacy",
        "other_run",
        "listed",
        "paused",
        "reclaimed",
    ];
    let won = items(call(conn, ACQUIRE_MANY, &mine).await);
    assert_eq!(won.iter().filter(|r| **r == 1).count(), 7, "{won:?}");
    let mut tokens = Tokens::new();
    for group in mine {
        let record = format!("leader:{{{group}}}:record");
        let token = cmd(conn, &["HGET", &record, "token"]).await;
        tokens.insert(group, token.as_str().unwrap().to_owned());
    }
    let again = items(call(conn, ACQUIRE_MANY, &["reclaimed"]).await);
    assert_eq!(again[0], 1, "{again:?}");
    cmd(
        conn,
        &["DEL", "leader:{norecord}:record", "leader:{legacy}:record"],
    )
    .await;
    cmd(conn, &["SET", "leader:{legacy}:record", "7"]).await;
    let other_run = ["HSET", "leader:{other_run}:record", "run", "another/run"];
    cmd(conn, &other_run).await;
    cmd(conn, &["DEL", "leader:{listed}:record"]).await;
    cmd(conn, &["RPUSH", "leader:{listed}:record", "x"]).await;
    cmd(
        conn,
        &["SET", "leader:{theirs}:lease", "other", "PX", "10000"],
    )
    .await;
    cmd(conn, &["RPUSH", "leader:{wrong}:lease", "x"]).await;
    if pause {
        cmd(conn, &["HSET", "leader:{paused}:paused", "by", "test"]).await;
    }
    tokens
}

/// Each group's answer is `renew.lua`'s for it alone, whether the call's
/// pause keys are checked at once (none exists) or one by one; a lease key
/// of another type is that group's error alone; nothing is written where
/// the answer is not 1.
#[tokio::test]
async fn one_call_answers_each_group_as_renew_would() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = server.connect().await.unwrap();
    for pause in [false, true] {
        cmd(&mut conn, &["FLUSHALL"]).await;
        let tokens = fixtures(&mut conn, pause).await;
        let mut groups: Vec<&str> = GROUPS.iter().map(|(g, _)| *g).collect();
        groups.push("wrong");
        let batched = items(renew(&mut conn, RENEW_MANY, &groups, &tokens).await);
        assert_eq!(batched.len(), groups.len(), "{batched:?}");
        for ((group, want), got) in GROUPS.iter().zip(&batched) {
            let want = if *group == "paused" && !pause {
                1
            } else {
                *want
            };
            assert_eq!(*got, want, "{group} (paused: {pause}): {batched:?}");
            // renew.lua, for the group alone, agrees.
            assert_eq!(
                renew(&mut conn, RENEW_ONE, &[group], &tokens).await,
                want,
                "{group} alone"
            );
        }
        let wrong = batched[9].as_str().unwrap_or_default();
        assert!(wrong.contains("WRONGTYPE"), "{batched:?}");
        assert_eq!(
            cmd(&mut conn, &["GET", "leader:{legacy}:record"]).await,
            "7"
        );
        let run = ["HGET", "leader:{other_run}:record", "run"];
        assert_eq!(cmd(&mut conn, &run).await, "another/run");
    }
}

/// With the rules of earlier versions (no `EXISTS`), a batched renewal
/// checks each group's pause key on its own: the paused group is still
/// answered paused, the others renewed.
#[tokio::test]
async fn without_exists_in_the_acl_a_paused_group_is_still_seen() {
    let earlier = ACL_RULES.replace(" +exists", "");
    assert_ne!(earlier, ACL_RULES);
    let (_server, mut admin, mut app) = script_user(&earlier).await;
    let tokens = fixtures(&mut admin, true).await;
    assert!(matches!(
        cmd(&mut app, &["EXISTS", "leader:{ok}:lease"]).await,
        Reply::Error(_)
    ));
    let reply = items(renew(&mut app, RENEW_MANY, &["ok", "paused"], &tokens).await);
    assert_eq!(reply, [Reply::Integer(1), Reply::Integer(-3)]);
}

/// A user that may not read hashes (no `HMGET`): a renewal of a lease with
/// a record, and an acquisition of a free lease with one, are errors — not
/// "not vouched for" (the renewal), not a first election that ignores the
/// last token (the acquisition) — and nothing is written.
#[tokio::test]
async fn a_record_the_acl_forbids_reading_is_an_error() {
    let rules = ACL_RULES.replace(" +hmget", "");
    assert_ne!(rules, ACL_RULES);
    let (_server, mut admin, mut app) = script_user(&rules).await;
    let tokens = fixtures(&mut admin, false).await;
    let refused = |reply: &Reply| {
        let text = match reply {
            Reply::Bulk(s) | Reply::Error(s) => s.to_lowercase(),
            // One group's error, in a batched call's answer.
            Reply::Array(items) => format!("{items:?}").to_lowercase(),
            other => format!("{other:?}"),
        };
        text.contains("permission")
            || text.contains("noperm")
            || text.contains("can't run this command")
    };
    // The server marker, read first with the same command, fails the whole
    // call (record.lua); either way, an error.
    let renewed = renew(&mut app, RENEW_MANY, &["ok"], &tokens).await;
    assert!(refused(&renewed), "renew_many: {renewed:?}");
    let alone = renew(&mut app, RENEW_ONE, &["ok"], &tokens).await;
    assert!(refused(&alone), "renew: {alone:?}");
    // A free lease with a record: an error, nothing written.
    cmd(&mut admin, &["DEL", "leader:{ok}:lease"]).await;
    let token = cmd(&mut admin, &["HGET", "leader:{ok}:record", "token"]).await;
    let acquire = call(&mut app, ACQUIRE_MANY, &["ok"]).await;
    assert!(refused(&acquire), "acquire_many: {acquire:?}");
    assert!(cmd(&mut admin, &["GET", "leader:{ok}:lease"])
        .await
        .is_nil());
    let after = cmd(&mut admin, &["HGET", "leader:{ok}:record", "token"]).await;
    assert_eq!(after, token);
}
