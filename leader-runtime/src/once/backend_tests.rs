//! The rules of `once.lua` and of its in-memory twin, step by step, on both
//! backends (Redis: a `redis-server` of its own): the token clause, the
//! retry of a step whose reply was lost, crashed attempts counted against
//! the limit, and the read and reset that look at the lease.

use std::time::Duration;

use leader_testkit::RedisServer;

use crate::backend::once::{Holder, OnceKeys, Step, Stored, Verdict};
use crate::backend::{Acquire, Backend, Op};
use crate::{Config, MemoryBackend, Runtime};

const GROUP: &str = "once:migrate";
const TTL: Duration = Duration::from_secs(60);

/// `(verdict, attempts, failures)` of an answer.
fn brief((verdict, stored): (Verdict, Stored)) -> (Verdict, u32, u32) {
    (verdict, stored.attempts, stored.failures)
}

/// `scenario` on `backend`; `age(record key)` makes the record of the
/// name's group look one ttl older (every earlier leadership over).
async fn scenario<A, F>(backend: &Backend, age: A)
where
    A: Fn(String) -> F,
    F: std::future::Future<Output = ()>,
{
    let keys = OnceKeys::new("leader", GROUP);
    let op = Op {
        group: GROUP,
        keys: &keys.group,
        id: "a",
    };
    let acquire = || async {
        match backend.acquire(&op, TTL).await.unwrap() {
            Acquire::Won { token, .. } => token,
            other => panic!("{other:?}"),
        }
    };
    let holder = |token| Holder {
        group: GROUP,
        keys: &keys,
        id: "a",
        token,
    };
    let step =
        |token, step| async move { brief(backend.once_step(&holder(token), step).await.unwrap()) };
    let read = || async { brief(backend.once_read(GROUP, &keys, TTL).await.unwrap()) };
    let reset = || async { brief(backend.once_reset(GROUP, &keys, TTL).await.unwrap()) };
    let begin = |limit| Step::Begin { limit };
    let fail = Step::Fail { error: "boom" };

    assert_eq!(read().await, (Verdict::Open, 0, 0));
    // a holds the lease, then takes it again (a re-claim after a renewal
    // that timed out): the key holds a's id under a newer token. A step of
    // the older leadership is refused — by the token clause alone.
    let old = acquire().await;
    let token = acquire().await;
    assert!(token > old);
    assert_eq!(step(old, begin(3)).await, (Verdict::Lost, 0, 0));
    assert_eq!(step(old, fail).await, (Verdict::Lost, 0, 0));
    assert_eq!(read().await, (Verdict::Held, 0, 0));

    // A begin and a fail retried after a lost reply count nothing more.
    assert_eq!(step(token, begin(3)).await, (Verdict::Run, 1, 0));
    assert_eq!(step(token, begin(3)).await, (Verdict::Run, 1, 0));
    assert_eq!(step(token, fail).await, (Verdict::Open, 1, 1));
    assert_eq!(step(token, fail).await, (Verdict::Open, 1, 1));
    // No reset while the lease is held: an attempt may be running.
    assert_eq!(reset().await, (Verdict::Busy, 1, 1));
    assert!(backend.release(&op, "ch", token).await.unwrap());
    // Released, but the earlier leadership of `old` may still believe it
    // leads (a re-claim keeps its time in the record): an attempt of it
    // may still run.
    assert_eq!(read().await, (Verdict::Held, 1, 1));
    assert_eq!(reset().await, (Verdict::Busy, 1, 1));
    age(keys.group.record.clone()).await;
    assert_eq!(read().await, (Verdict::Open, 1, 1));

    // Crashes alone use up the limit: two attempts begun, never ended.
    assert_eq!(reset().await, (Verdict::Open, 0, 0));
    for attempts in 1..=2 {
        let token = acquire().await;
        assert_eq!(step(token, begin(2)).await, (Verdict::Run, attempts, 0));
        backend.release(&op, "ch", token).await.unwrap();
        age(keys.group.record.clone()).await;
    }
    let token = acquire().await;
    assert_eq!(step(token, begin(2)).await, (Verdict::Failed, 2, 0));
    // A higher limit allows one more, which succeeds; a retried done (a lost
    // reply) and a stale runner's done change nothing.
    assert_eq!(step(token, begin(3)).await, (Verdict::Run, 3, 0));
    let done = Step::Done { summary: "ok" };
    assert_eq!(step(token, done).await, (Verdict::Done, 3, 0));
    let (_, stored) = backend.once_step(&holder(old), done).await.unwrap();
    let recorded = stored.done.unwrap();
    assert_eq!((recorded.token, recorded.by.as_str()), (token, "a"));
    backend.release(&op, "ch", token).await.unwrap();
    assert_eq!(read().await, (Verdict::Done, 3, 0));
    assert_eq!(reset().await, (Verdict::Done, 3, 0), "a success stays");
}

#[tokio::test(start_paused = true)]
async fn the_rules_in_memory() {
    let age = |_| tokio::time::advance(TTL);
    scenario(&Backend::Memory(MemoryBackend::new()), age).await;
}

#[tokio::test]
async fn the_rules_on_redis() {
    let server = RedisServer::start().await.unwrap();
    let rt = Runtime::new(
        Config::builder()
            .redis_url(server.url())
            .instance_id("a")
            .build()
            .unwrap(),
    )
    .unwrap();
    let age = |record: String| {
        let server = &server;
        async move {
            for field in ["until", "prior"] {
                server.cmd(&["HSET", &record, field, "0"]).await.unwrap();
            }
        }
    };
    // A server the fleet has used for longer than a ttl: its marker
    // vouches that no record went missing (record.lua).
    let keys = OnceKeys::new("leader", GROUP);
    rt.ctx().backend.once_read(GROUP, &keys, TTL).await.unwrap();
    server
        .cmd(&["HSET", "leader:server", "since", "0"])
        .await
        .unwrap();
    scenario(&rt.ctx().backend, age).await;
    rt.shutdown().await;
}

/// A runner's lease key and record evicted together mid-body: no record
/// says until when it may lead, but the eviction is within a ttl, so a
/// waiter does not conclude the attempts are used up, and no reset counts
/// them away, while the body may still run.
#[tokio::test(start_paused = true)]
async fn an_attempt_whose_record_was_evicted_may_still_run() {
    let mem = MemoryBackend::new();
    let backend = Backend::Memory(mem.clone());
    let keys = OnceKeys::new("leader", GROUP);
    let op = Op {
        group: GROUP,
        keys: &keys.group,
        id: "a",
    };
    let Acquire::Won { token, .. } = backend.acquire(&op, TTL).await.unwrap() else {
        panic!("not won")
    };
    let holder = Holder {
        group: GROUP,
        keys: &keys,
        id: "a",
        token,
    };
    let begun = backend.once_step(&holder, Step::Begin { limit: 1 }).await;
    assert_eq!(brief(begun.unwrap()), (Verdict::Run, 1, 0));
    mem.lose_lease("leader", GROUP);
    mem.evict_record(&keys.group.record);
    let read = || async { brief(backend.once_read(GROUP, &keys, TTL).await.unwrap()) };
    assert_eq!(read().await, (Verdict::Held, 1, 0));
    let reset = backend.once_reset(GROUP, &keys, TTL).await.unwrap();
    assert_eq!(brief(reset), (Verdict::Busy, 1, 0));
    // One ttl later every view of it has ended: the attempts are used up.
    tokio::time::advance(TTL).await;
    assert_eq!(read().await, (Verdict::Open, 1, 0));
}
