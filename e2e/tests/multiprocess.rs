//! Several `leader-instance` processes against one real `redis-server`
//! (issue 2): kill -9 and SIGTERM the leader, and check every leadership
//! window of the run.

mod support;

use std::time::Duration;

use support::checker::Line;
use support::fleet::{Fleet, FleetConfig};
use support::{ms, ns_to_ms, SERIAL};

/// Crash failover bound: ttl + 250 ms.
const CRASH_SLACK: Duration = ms(250);
/// Graceful handover bound.
const GRACEFUL: Duration = ms(100);

/// Waits for a leader and for it to run the gated body and renew once.
async fn settled_leader(fleet: &Fleet) -> usize {
    let (slot, _) = fleet
        .wait_elected_after(0, ms(10_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let m = fleet.member(slot);
    for what in ["run", "renewed"] {
        m.wait_line(
            0,
            |l| match what {
                "run" => matches!(l, Line::Run { .. }),
                _ => matches!(l, Line::Renewed { .. }),
            },
            ms(5_000),
        )
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    }
    slot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_then_sigterm_the_leader() {
    let _serial = SERIAL.lock().await;
    let cfg = FleetConfig::new();
    let ttl = cfg.ttl;
    let mut fleet = Fleet::start(cfg).await;

    // kill -9: another instance leads within ttl + 250 ms.
    let first = settled_leader(&fleet).await;
    let first_token = fleet.token_of(first).expect("leader has a token");
    let killed_at = fleet.kill9(first).await;
    let (second, elected) = fleet
        .wait_elected_after(killed_at, ttl + ms(3_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let Line::Elected {
        token: second_token,
        at,
        ..
    } = elected
    else {
        unreachable!()
    };
    let failover = at - killed_at;
    eprintln!("crash failover: {:.1} ms", ns_to_ms(failover));
    fleet.check(
        failover <= (ttl + CRASH_SLACK).as_nanos() as u64,
        format!("crash failover took {:.1} ms", ns_to_ms(failover)),
    );
    fleet.check(
        second != first && second_token > first_token,
        "a new leader with a larger token",
    );
    fleet.spawn(first);
    fleet.wait_ready(first).await;

    // SIGTERM: the leader releases on shutdown; another leads within 100 ms.
    fleet
        .member(second)
        .wait_line(
            0,
            |l| matches!(l, Line::Run { token, .. } if *token == second_token),
            ms(5_000),
        )
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let stopped_name = fleet.member(second).name.clone();
    let stopped_at = fleet.terminate(second).await;
    let (third, elected) = fleet
        .wait_elected_after(stopped_at, ms(5_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let Line::Elected {
        token: third_token,
        at,
        ..
    } = elected
    else {
        unreachable!()
    };
    let handover = at - stopped_at;
    eprintln!("graceful handover: {:.1} ms", ns_to_ms(handover));
    fleet.check(
        handover <= GRACEFUL.as_nanos() as u64,
        format!("graceful handover took {:.1} ms", ns_to_ms(handover)),
    );
    fleet.check(
        third != second && third_token > second_token,
        "a new leader with a larger token",
    );
    let history = fleet.history();
    let stopped = history.windows_of(&stopped_name).last().cloned();
    fleet.check(
        stopped
            .as_ref()
            .and_then(|w| w.lost.as_ref())
            .is_some_and(|(r, _)| r == "shutdown"),
        format!("the stopped leader logged its shutdown: {stopped:?}"),
    );

    fleet
        .member(third)
        .wait_line(
            0,
            |l| matches!(l, Line::Run { token, .. } if *token == third_token),
            ms(5_000),
        )
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    fleet.stop_all().await;
    let history = fleet.assert_safe();
    fleet.check(history.windows.len() >= 3, "at least three leaderships");
    fleet.check(
        history.runs.len() >= 3,
        format!("gated bodies ran: {}", history.runs.len()),
    );
}
