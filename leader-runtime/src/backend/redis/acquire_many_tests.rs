//! `acquire_many` through the runtime's own parser (`split_flat`,
//! `parse_acquire`) on a real `redis-server`: holders that look like the
//! reply's kinds or numbers, or hold odd bytes, a lease with no expiry, a
//! paused group held by another instance and a group's own error, on the
//! cheap path (no pause key in the call) and the group-by-group one; every
//! group not won answers exactly as a lone `acquire.lua` call does, in its
//! place (an answer shifted by one would show).

use std::collections::HashMap;
use std::time::Duration;

use leader_testkit::{RedisCluster, RedisServer};
use redis::AsyncCommands;

use crate::backend::{slot, Acquire, Backend, Op};
use crate::names::GroupKeys;
use crate::{Config, Runtime};

pub(super) const TTL: Duration = Duration::from_secs(5);

/// Holders written straight into lease keys: kinds of the flat reply
/// (1 won, 0 held, 2 paused, -1 error), a word of it, separators, bytes
/// that are not UTF-8, nothing at all.
const HOLDERS: [(&str, &[u8]); 8] = [
    ("one", b"1"),
    ("minus", b"-1"),
    ("zero", b"0"),
    ("two", b"2"),
    ("word", b"paused"),
    ("odd", b"a b\r\n*3\r\n:1"),
    ("empty", b""),
    ("bytes", b"\xff\x00\x01"),
];

/// `me`'s attempts at `groups` in one `acquire_many` (for a single group,
/// the backend's lone `acquire.lua` call), each error as text.
pub(super) async fn answers(backend: &Backend, groups: &[&str]) -> Vec<Result<Acquire, String>> {
    answers_of(backend, "me", groups).await
}

/// [`answers`] for instance `id`.
pub(super) async fn answers_of(
    backend: &Backend,
    id: &str,
    groups: &[&str],
) -> Vec<Result<Acquire, String>> {
    let keys: Vec<GroupKeys> = groups.iter().map(|g| GroupKeys::new("leader", g)).collect();
    let pairs: Vec<(&str, &GroupKeys)> = groups.iter().copied().zip(&keys).collect();
    backend
        .acquire_many(id, TTL, &pairs)
        .await
        .into_iter()
        .map(|a| a.map_err(|e| e.to_string()))
        .collect()
}

async fn alone(backend: &Backend, group: &str) -> Result<Acquire, String> {
    let keys = GroupKeys::new("leader", group);
    let op = Op {
        group,
        keys: &keys,
        id: "me",
    };
    backend.acquire(&op, TTL).await.map_err(|e| e.to_string())
}

/// The answer with the lease's remaining time dropped (it moves by the ms),
/// and an error's text (a lone call's reads `ResponseError: …`, a batched
/// group's `ERR …`).
fn shape(a: &Result<Acquire, String>) -> String {
    match a {
        Ok(Acquire::Held { holder, pttl }) => {
            format!("held by {holder:?}, expires: {}", pttl.is_some())
        }
        Ok(Acquire::Won { .. }) => "won".to_owned(),
        Ok(Acquire::Paused) => "paused".to_owned(),
        Err(_) => "error".to_owned(),
    }
}

#[tokio::test]
async fn every_group_answers_in_its_place_as_alone_on_both_paths() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for (group, holder) in HOLDERS {
        let () = conn
            .pset_ex(format!("leader:{{{group}}}:lease"), holder, 10_000)
            .await
            .unwrap();
    }
    let () = conn.set("leader:{forever}:lease", "x").await.unwrap();
    let () = conn
        .set("leader:{junk}:token", "not-a-token")
        .await
        .unwrap();
    let () = conn
        .pset_ex("leader:{pz}:lease", "1", 10_000)
        .await
        .unwrap();
    let rt = Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .instance_id("me")
            .build()
            .unwrap(),
    )
    .unwrap();
    let backend = &rt.ctx().backend;

    let mut groups: Vec<&str> = HOLDERS.iter().map(|(g, _)| *g).collect();
    groups.extend(["forever", "junk", "free"]);
    let check = |got: &[Result<Acquire, String>], groups: &[&str]| {
        assert_eq!(got.len(), groups.len(), "{got:?}");
        for (i, (group, holder)) in HOLDERS.iter().enumerate() {
            match &got[i] {
                Ok(Acquire::Held {
                    holder: h,
                    pttl: Some(p),
                }) if *h == String::from_utf8_lossy(holder) && *p <= Duration::from_secs(10) => {}
                other => panic!("{group}: {other:?} in {got:?}"),
            }
        }
        let n = HOLDERS.len();
        assert_eq!(shape(&got[n]), r#"held by "x", expires: false"#, "{got:?}");
        assert!(
            matches!(&got[n + 1], Err(e) if e.contains("holds no valid token")),
            "{got:?}"
        );
        assert!(matches!(got[n + 2], Ok(Acquire::Won { .. })), "{got:?}");
    };
    // No pause key in the call: the held groups on the cheap path.
    let cheap = answers(backend, &groups).await;
    check(&cheap, &groups);
    // A paused group (held by "1") first: every group checked on its own,
    // and nothing after it moves.
    let () = conn.hset("leader:{pz}:paused", "by", "test").await.unwrap();
    groups.insert(0, "pz");
    let full = answers(backend, &groups).await;
    assert_eq!(full[0], Ok(Acquire::Paused), "{full:?}");
    check(&full[1..], &groups[1..]);
    // Each group not won answers as a lone acquire.lua call does.
    for (group, batched) in groups.iter().zip(&full) {
        if *group != "free" {
            assert_eq!(
                shape(batched),
                shape(&alone(backend, group).await),
                "{group}"
            );
        }
    }
    rt.shutdown().await;
}

/// Two group names whose keys share one hash slot (a cluster batches only
/// those into one call).
fn two_in_one_slot() -> (String, String) {
    let mut seen: HashMap<u16, String> = HashMap::new();
    for n in 0.. {
        let group = format!("g{n}");
        if let Some(first) = seen.insert(slot(group.as_bytes()), group.clone()) {
            return (first, group);
        }
    }
    unreachable!()
}

/// On a Redis Cluster one call's keys share a slot; the call-wide `EXISTS`
/// (several keys) runs there too, and a paused group another instance holds
/// is answered paused, beside one on the cheap path.
#[tokio::test]
async fn on_a_cluster_a_batch_in_one_slot_sees_the_pause() {
    let cluster = RedisCluster::start().await.unwrap();
    let (a, b) = two_in_one_slot();
    let lease = |g: &str| format!("leader:{{{g}}}:lease");
    let node = cluster.node(cluster.master_of(&lease(&a)).await.unwrap());
    for g in [&a, &b] {
        node.cmd(&["SET", &lease(g), "other", "PX", "10000"])
            .await
            .unwrap()
            .ok()
            .unwrap();
    }
    let rt = Runtime::new(
        Config::builder()
            .redis_cluster_urls(cluster.urls())
            .instance_id("me")
            .build()
            .unwrap(),
    )
    .unwrap();
    let backend = &rt.ctx().backend;
    let held = |a: &Result<Acquire, String>| matches!(a, Ok(Acquire::Held { holder, pttl: Some(_) }) if holder == "other");
    let got = answers(backend, &[&a, &b]).await;
    assert!(held(&got[0]) && held(&got[1]), "{got:?}");
    node.cmd(&["HSET", &format!("leader:{{{b}}}:paused"), "by", "test"])
        .await
        .unwrap()
        .ok()
        .unwrap();
    let got = answers(backend, &[&a, &b]).await;
    assert!(held(&got[0]), "{got:?}");
    assert_eq!(got[1], Ok(Acquire::Paused), "{got:?}");
    rt.shutdown().await;
}
