//! `acquire_many.lua` on a real `redis-server`, called directly: one call
//! answers every kind of group (acquired, held, paused, an error of its own)
//! as `acquire.lua` would for that group alone, in the flat reply the
//! runtime parses; with no pause key in the call (one `EXISTS` for all) and
//! with one (each group's pause key checked on its own); and with
//! an ACL user that may not run `EXISTS` (the rules of earlier versions) the
//! pause is still checked, group by group.

use leader_testkit::{RedisServer, Reply, RespConn};

mod support;
use support::{script_user, ACL_RULES};

const SCRIPT: &str = concat!(
    include_str!("../src/backend/scripts/record.lua"),
    include_str!("../src/backend/scripts/acquire_many.lua")
);

const TTL_MS: &str = "1500";

fn keys(group: &str) -> [String; 3] {
    [
        format!("leader:{{{group}}}:lease"),
        format!("leader:{{{group}}}:token"),
        format!("leader:{{{group}}}:paused"),
    ]
}

/// `acquire_many.lua` for `groups` as instance `id`, on `conn`: the flat reply.
async fn acquire_many(conn: &mut RespConn, id: &str, groups: &[&str]) -> Vec<Reply> {
    let mut keys: Vec<String> = groups.iter().flat_map(|g| keys(g)).collect();
    // The server marker (record.lua), last.
    keys.push("leader:server".to_owned());
    let count = keys.len().to_string();
    let mut args = vec!["EVAL", SCRIPT, &count];
    args.extend(keys.iter().map(String::as_str));
    args.extend([id, TTL_MS]);
    match conn.cmd(&args).await.unwrap() {
        Reply::Array(items) => items,
        other => panic!("acquire_many replied {other:?}"),
    }
}

/// The flat reply cut into one part per group by its kind (the lengths the
/// runtime's parser expects); panics on an unknown kind or a short part.
fn split(reply: &[Reply]) -> Vec<&[Reply]> {
    let mut parts = Vec::new();
    let mut at = 0;
    while at < reply.len() {
        let len = match reply[at] {
            Reply::Integer(1) => 5,
            Reply::Integer(0) => 3,
            Reply::Integer(2 | -1) => 2,
            ref other => panic!("unknown kind {other:?} in {reply:?}"),
        };
        parts.push(&reply[at..at + len]);
        at += len;
    }
    parts
}

fn held_by(part: &[Reply]) -> (&str, i64) {
    match part {
        [Reply::Integer(0), Reply::Bulk(holder), Reply::Integer(pttl)] => (holder, *pttl),
        other => panic!("not held: {other:?}"),
    }
}

/// Token, wait, why, and the token before it ("": none).
fn won(part: &[Reply]) -> (u128, i64, &str, &str) {
    match part {
        [Reply::Integer(1), Reply::Bulk(token), Reply::Integer(wait), Reply::Bulk(why), Reply::Bulk(last)] => {
            (token.parse().unwrap(), *wait, why, last)
        }
        other => panic!("not won: {other:?}"),
    }
}

fn paused(part: &[Reply]) -> bool {
    matches!(part, [Reply::Integer(2), Reply::Bulk(word)] if word == "paused")
}

fn error(part: &[Reply]) -> &str {
    match part {
        [Reply::Integer(-1), Reply::Bulk(message)] => message,
        other => panic!("not an error: {other:?}"),
    }
}

async fn cmd(conn: &mut RespConn, args: &[&str]) -> Reply {
    conn.cmd(args).await.unwrap()
}

/// `group`'s lease held by instance `other` for 10 s.
async fn hold(conn: &mut RespConn, group: &str) {
    let lease = format!("leader:{{{group}}}:lease");
    cmd(conn, &["SET", &lease, "other", "PX", "10000"]).await;
}

/// A server whose user `app` runs the scripts under the documented ACL
/// rules without `command` (as written there, e.g. `+exists`): the server,
/// an admin connection and the app's.
async fn acl_without(command: &str) -> (RedisServer, RespConn, RespConn) {
    let rules = ACL_RULES.replace(&format!(" {command}"), "");
    assert_ne!(rules, ACL_RULES, "{command} is not in the rules");
    script_user(&rules).await
}

/// Sets up, on `conn`: `held` leased to `other` for 10 s, `mine` leased to
/// `me` (a re-claim), `junk` with a record that holds no token, `wrong` with
/// a lease key of the wrong type; `free` has no keys.
async fn fixtures(conn: &mut RespConn) {
    hold(conn, "held").await;
    cmd(conn, &["SET", "leader:{junk}:token", "not-a-token"]).await;
    cmd(conn, &["RPUSH", "leader:{wrong}:lease", "x"]).await;
    let first = acquire_many(conn, "me", &["mine", "held"]).await;
    let parts = split(&first);
    assert_eq!(won(parts[0]).2, "first", "{first:?}");
}

#[tokio::test]
async fn one_call_answers_each_group_as_acquire_would_on_both_paths() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = server.connect().await.unwrap();
    fixtures(&mut conn).await;
    let groups = ["held", "free", "mine", "junk", "wrong"];
    let check = |reply: &[Reply]| {
        let parts = split(reply);
        assert_eq!(parts.len(), groups.len(), "{reply:?}");
        let (holder, pttl) = held_by(parts[0]);
        assert_eq!(holder, "other");
        assert!((1..=10_000).contains(&pttl), "{pttl}");
        won(parts[1]);
        won(parts[2]);
        assert!(
            error(parts[3]).contains("holds no valid token"),
            "{reply:?}"
        );
        assert!(error(parts[4]).contains("WRONGTYPE"), "{reply:?}");
    };
    // No pause key among them: refused attempts take the cheap path.
    let cheap = acquire_many(&mut conn, "me", &groups).await;
    check(&cheap);
    let parts = split(&cheap);
    // A new group: what is left of one ttl after the server marker was
    // written, at this call's start (record.lua).
    let (_, wait, why, last) = won(parts[1]);
    assert!((1..=1500).contains(&wait), "{wait}");
    assert_eq!((why, last), ("first", ""));
    // Nothing written for the errors.
    assert!(cmd(&mut conn, &["GET", "leader:{junk}:lease"])
        .await
        .is_nil());
    // A pause key anywhere in the call: each group's pause key is checked on
    // its own, with the same answers for the others (free and mine are ours
    // now: re-claims).
    cmd(&mut conn, &["HSET", "leader:{other}:paused", "by", "test"]).await;
    let full = acquire_many(
        &mut conn,
        "me",
        &["held", "free", "mine", "junk", "wrong", "other"],
    )
    .await;
    let parts = split(&full);
    assert_eq!(parts.len(), 6, "{full:?}");
    check(&full[..full.len() - 2]);
    assert!(paused(parts[5]), "{full:?}");
    // The tokens only grow, and each win says which one came before it.
    assert!(won(parts[1]).0 > won(split(&cheap)[1]).0);
    assert_eq!(won(parts[1]).3, won(split(&cheap)[1]).0.to_string());
}

#[tokio::test]
async fn a_paused_group_is_answered_paused_even_while_another_instance_holds_it() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = server.connect().await.unwrap();
    hold(&mut conn, "a").await;
    hold(&mut conn, "b").await;
    // A key of any type pauses (record.lua), not only pause.lua's hash.
    cmd(&mut conn, &["SET", "leader:{b}:paused", "1"]).await;
    cmd(&mut conn, &["HSET", "leader:{c}:paused", "by", "test"]).await;
    let reply = acquire_many(&mut conn, "me", &["a", "b", "c"]).await;
    let parts = split(&reply);
    assert_eq!(parts.len(), 3, "{reply:?}");
    assert_eq!(held_by(parts[0]).0, "other");
    assert!(paused(parts[1]), "held and paused: {reply:?}");
    assert!(paused(parts[2]), "free and paused: {reply:?}");
    // Nothing written for the paused groups.
    assert!(cmd(&mut conn, &["GET", "leader:{c}:lease"]).await.is_nil());
    assert!(cmd(&mut conn, &["EXISTS", "leader:{c}:token"]).await == Reply::Integer(0));
}

#[tokio::test]
async fn without_exists_in_the_acl_the_pause_is_checked_group_by_group() {
    // The documented rules as earlier versions wrote them: no `+exists`.
    let (_server, mut admin, mut app) = acl_without("+exists").await;
    hold(&mut admin, "a").await;
    hold(&mut admin, "b").await;
    cmd(&mut admin, &["HSET", "leader:{b}:paused", "by", "test"]).await;
    // Those rules have no EXISTS.
    assert!(matches!(
        cmd(&mut app, &["EXISTS", "leader:{a}:lease"]).await,
        Reply::Error(_)
    ));
    let reply = acquire_many(&mut app, "me", &["a", "b", "free"]).await;
    let parts = split(&reply);
    assert_eq!(parts.len(), 3, "{reply:?}");
    assert_eq!(held_by(parts[0]).0, "other");
    assert!(paused(parts[1]), "{reply:?}");
    assert_eq!(won(parts[2]).2, "first", "{reply:?}");
}

/// The documented ACL rules (`support::ACL_RULES`, the rules of
/// `ConfigBuilder::redis_url`) must run a follower's batched attempt without
/// a single denial: operators alert on `ACL LOG`, and `redis_acl.rs` holds
/// the runtime to "no denial" under these rules. A refused `EXISTS` (the
/// fallback for earlier rules) is logged as a denial on every call.
#[tokio::test]
async fn the_documented_acl_rules_run_a_batched_attempt_without_a_denial() {
    let (_server, mut admin, mut app) = script_user(ACL_RULES).await;
    hold(&mut admin, "a").await;
    let reply = acquire_many(&mut app, "me", &["a", "b"]).await;
    let parts = split(&reply);
    assert_eq!(held_by(parts[0]).0, "other", "{reply:?}");
    won(parts[1]);
    let denials = cmd(&mut admin, &["ACL", "LOG"]).await;
    assert!(
        matches!(&denials, Reply::Array(v) if v.is_empty()),
        "ACL denials: {denials:?}"
    );
}

/// The call-wide `EXISTS` goes in chunks of 500 keys: a pause key past the
/// first chunk is seen too (the runtime sends at most 500 groups per call;
/// the script takes more).
#[tokio::test]
async fn a_pause_past_the_first_500_groups_is_seen() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = server.connect().await.unwrap();
    for g in ["g550", "g551"] {
        cmd(
            &mut conn,
            &[
                "SET",
                &format!("leader:{{{g}}}:lease"),
                "other",
                "PX",
                "10000",
            ],
        )
        .await;
    }
    cmd(&mut conn, &["HSET", "leader:{g550}:paused", "by", "test"]).await;
    let names: Vec<String> = (0..600).map(|i| format!("g{i}")).collect();
    let groups: Vec<&str> = names.iter().map(String::as_str).collect();
    let reply = acquire_many(&mut conn, "me", &groups).await;
    let parts = split(&reply);
    assert_eq!(parts.len(), 600);
    assert!(paused(parts[550]), "{:?}", parts[550]);
    assert_eq!(held_by(parts[551]).0, "other");
    for (i, part) in parts.iter().enumerate() {
        if i != 550 && i != 551 {
            won(part);
        }
    }
}

/// An ACL that refuses `PTTL` makes the refused attempt of a group another
/// instance holds that group's error, not the whole call's: the free group
/// beside it is still won. Fails when `PTTL` is called unprotected (the
/// script's error fails the call, after it may have granted earlier groups).
#[tokio::test]
async fn a_refused_pttl_is_that_groups_error() {
    let (_server, mut admin, mut app) = acl_without("+pttl").await;
    hold(&mut admin, "a").await;
    let reply = acquire_many(&mut app, "me", &["a", "b"]).await;
    let parts = split(&reply);
    assert_eq!(parts.len(), 2, "{reply:?}");
    assert!(!error(parts[0]).is_empty(), "{reply:?}");
    won(parts[1]);
}
