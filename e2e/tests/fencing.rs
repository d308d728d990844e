//! Fencing tokens end to end: a tiny downstream store that accepts a write
//! only with a token at least as large as the last it saw, written to from
//! every gated body (after the body's "work", without checking again).
//!
//! A leader stopped (SIGSTOP) in the middle of its body for 2 × ttl resumes
//! after another instance took over and wrote with a larger token: its
//! write goes out — and the store rejects it. (That no write from an
//! instance that believed it led is ever rejected is checked by every
//! scenario of the chaos suite, the random mix included.)

mod support;

use leader_testkit::monotonic_now_ns;
use support::chaos::check_fencing;
use support::checker::Line;
use support::fleet::{Fleet, FleetConfig};
use support::{after, ms, sleep_until_ns, SERIAL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_paused_mid_body_gets_its_stale_write_rejected() {
    let _serial = SERIAL.lock().await;
    let mut cfg = FleetConfig::new().with_store();
    cfg.body = ms(300); // long enough to stop the leader inside it
    cfg.tick = ms(50);
    let ttl = cfg.ttl;
    let mut fleet = Fleet::start(cfg).await;
    let leader = fleet
        .settle(ms(10_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let token = fleet.token_of(leader).unwrap();
    let name = fleet.member(leader).name.clone();

    // Stop it right after a body began (its write comes 300 ms later).
    let now = monotonic_now_ns();
    let from = support::fleet::index_after(&fleet.member(leader).lines(), now);
    let (_, begin) = fleet
        .member(leader)
        .wait_line(from, |l| matches!(l, Line::Begin { .. }), ms(2_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let paused = fleet.pause(leader);
    let Line::Begin { start, .. } = begin else {
        unreachable!()
    };
    fleet.check(
        paused - start < ms(200).as_nanos() as u64,
        "stopped inside the body",
    );

    // Another instance takes over and writes with a larger token.
    let (next, elected) = fleet
        .wait_elected_after(paused, ttl + ms(2_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let Line::Elected {
        token: next_token, ..
    } = elected
    else {
        unreachable!()
    };
    fleet
        .member(next)
        .wait_line(0, |l| matches!(l, Line::Write { token, result, .. } if *token == next_token && result == "ok"), ms(3_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    sleep_until_ns(after(paused, ttl * 2)).await;
    let resumed = fleet.resume(leader);

    // The resumed body writes with its old token: rejected as stale.
    let (_, write) = fleet
        .member(leader)
        .wait_line(0, |l| matches!(l, Line::Write { token: t, start, .. } if *t == token && *start >= resumed), ms(3_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let Line::Write {
        believed, result, ..
    } = write
    else {
        unreachable!()
    };
    fleet.check(
        result == "stale",
        format!("the paused leader's write was {result}"),
    );
    fleet.check(!believed, "its view had ended when it wrote");
    let rejected: Vec<_> = fleet
        .store
        .as_ref()
        .unwrap()
        .writes()
        .into_iter()
        .filter(|w| !w.accepted)
        .collect();
    fleet.check(
        rejected.len() == 1
            && rejected[0].instance == name
            && rejected[0].token == token
            && rejected[0].last_before >= next_token,
        format!("the store rejected exactly the stale write: {rejected:?}"),
    );

    // It comes back as a follower, and never ran a body after its view ended.
    fleet
        .member(leader)
        .wait_line(
            0,
            |l| matches!(l, Line::Lost { token: t, .. } if *t == token),
            ms(3_000),
        )
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    fleet
        .settle(ms(5_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    fleet.stop_all().await;
    fleet.assert_safe();
    let fencing = check_fencing(&fleet);
    fleet.check(
        fencing.violations.is_empty() && fencing.rejected_not_leader == 1 && fencing.accepted > 2,
        format!("{fencing:?}"),
    );
}
