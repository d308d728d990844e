//! Hand-overs for the balance, one at a time: one is never waited out for
//! a gated body (it is called off), and a take-back is only the first
//! attempt after the hand-over, by a leader nobody took the group from.

use tokio::sync::broadcast::Receiver;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use super::balance_liveness_tests::{join, leads, phantom, STEP};
use super::balance_tests::{balanced, names};
use crate::election::balance::take_back_after;
use crate::test_support::{RENEW, TTL};
use crate::{Event, LostReason, MemoryBackend, Runtime};
/// `a` leads 10 groups, `b` (a phantom member) wants 5 that nobody else
/// campaigns in, so `a` hands groups over that nobody takes: the backend,
/// `a`, `b`'s task and the first group handed over.
async fn handing_over_to_nobody() -> (MemoryBackend, Runtime, JoinHandle<()>, String) {
    let mem = MemoryBackend::new();
    let a = balanced(&mem, "a");
    join(&a, &names()).await;
    sleep(TTL * 2).await;
    let mut handed = a.subscribe();
    let b = phantom(&mem, "b", 5);
    let group = next_hand_over(&mut handed).await;
    (mem, a, b, group)
}

/// The next group `rx` reports handed over (lost as stepped down).
async fn next_hand_over(rx: &mut Receiver<Event>) -> String {
    loop {
        let next = timeout(TTL * 5, rx.recv()).await.expect("no hand-over");
        if let Event::Lost {
            group,
            reason: LostReason::SteppedDown,
            ..
        } = next.unwrap()
        {
            return group;
        }
    }
}

/// Until `rt` leads `group` (at most 5 ttl).
async fn until_leads(rt: &Runtime, group: &str) {
    let end = Instant::now() + TTL * 5;
    while !leads(rt, group) {
        assert!(Instant::now() < end, "{group} never led");
        sleep(STEP).await;
    }
}

/// The hand-overs of `group` on `rt` counted in vain so far.
fn in_vain(rt: &Runtime, group: &str) -> u32 {
    let group = rt.registered(group).unwrap();
    group
        .vain_take_backs
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// `busy` is a hint: a gated body that started as the hand-over began
/// (on another thread, where the hint may miss it; here a hint that misses
/// every run) is not waited for. `z` leads g0 and runs a body for 3 ttl;
/// `a` joins, and, first by id, has g0 as its share. `z` stops admitting,
/// finds the body in flight, admits again and keeps leading: the body's
/// lease holds to its end, g0 never goes without a leader, and the next
/// round after the body hands it over; a gated call while the body runs
/// (after the hand-over was called off) runs. Fails on the old code: the
/// hand-over drained, the view ended under the body, and the lease was
/// left to expire (g0 leaderless for up to a ttl, the body's lease lost);
/// and on a `quiesce` that does not admit again, the gated call is refused.
#[tokio::test(start_paused = true)]
async fn a_hand_over_for_the_balance_is_called_off_for_a_body_in_flight() {
    let mem = MemoryBackend::new();
    let z = balanced(&mem, "z");
    let g0 = &names()[..1];
    join(&z, g0).await;
    sleep(TTL).await;
    assert!(leads(&z, "g0"));
    z.registered("g0").unwrap().runs.blind_busy();
    let mut events = z.subscribe();
    let body = z.run_if_leader("g0", || async {
        sleep(TTL * 3).await;
        crate::current_lease().is_some_and(|l| l.is_valid())
    });
    let a = balanced(&mem, "a");
    let during = async {
        join(&a, g0).await;
        // Every sample while the body runs: z leads g0.
        let (mut samples, mut z_led) = (0, 0);
        let end = Instant::now() + TTL * 3 - STEP;
        while Instant::now() < end {
            assert!(!(leads(&z, "g0") && leads(&a, "g0")), "two leaders");
            samples += 1;
            z_led += usize::from(leads(&z, "g0"));
            sleep(STEP).await;
        }
        // The body still runs, the hand-over was called off at every
        // round since a joined: z admits gated calls again.
        let admitted = z.run_if_leader("g0", || async {}).await.is_some();
        (samples, z_led, admitted)
    };
    let (valid_to_the_end, (samples, z_led, admitted)) = tokio::join!(body, during);
    assert_eq!(valid_to_the_end, Some(true), "the body's lease held");
    assert_eq!(z_led, samples, "z led g0 throughout the body");
    assert!(
        admitted,
        "a gated call refused after the hand-over was called off"
    );
    // Once idle, g0 goes to a at a later round, leaderless only between
    // z's release and a's acquire (instant here).
    let end = Instant::now() + RENEW * 3;
    while !leads(&a, "g0") {
        assert!(
            leads(&z, "g0") && Instant::now() < end,
            "g0 leaderless, or never handed over"
        );
        sleep(STEP).await;
    }
    assert_eq!(next_hand_over(&mut events).await, "g0");
    assert!(events.try_recv().is_err(), "one loss of z's: the hand-over");
}

/// `a` leads g0 and g1, then `b` joins both: at shares of 1 and 1, `a`
/// hands one over and `b` takes it. That group, and when `a` handed it over.
async fn b_takes_a_hand_over(a: &Runtime, b: &Runtime) -> (String, Instant) {
    let two = &names()[..2];
    join(a, two).await;
    sleep(TTL).await;
    assert!(leads(a, "g0") && leads(a, "g1"));
    let mut handed = a.subscribe();
    join(b, two).await;
    let group = next_hand_over(&mut handed).await;
    let handed_at = Instant::now();
    until_leads(b, &group).await;
    (group, handed_at)
}

/// A take-back after the group's taker released it cleanly (here: an
/// operator's step-down of `b`, within `a`'s take-back window) is no
/// hand-over in vain: `b` held the group, as its release notice says.
/// Fails on the old code: the acquire found no earlier holder's time to
/// wait out, so `a` counted the hand-over as one nobody took (and, at a
/// layout where the takers campaign in fewer groups, kept the group).
#[tokio::test(start_paused = true)]
async fn a_take_back_after_a_clean_release_elsewhere_is_not_in_vain() {
    let mem = MemoryBackend::new();
    let (a, b) = (balanced(&mem, "a"), balanced(&mem, "b"));
    let (group, _) = b_takes_a_hand_over(&a, &b).await;
    // b steps down at once.
    b.step_down(&group).await.unwrap();
    until_leads(&a, &group).await;
    assert_eq!(in_vain(&a, &group), 0, "counted in vain");
    drop(b);
}

/// As above with the notice connections down when `b` releases: `a` gets
/// no release notice, and learns from its take-back's acquire that the
/// token before its own is no longer the one it released. Fails on the old
/// code: with no notice and no earlier holder's time to wait out, the
/// take-back counted in vain.
#[tokio::test(start_paused = true)]
async fn a_take_back_after_a_clean_release_elsewhere_is_not_in_vain_without_notices() {
    let mem = MemoryBackend::new();
    let (a, b) = (balanced(&mem, "a"), balanced(&mem, "b"));
    let (group, handed_at) = b_takes_a_hand_over(&a, &b).await;
    // b steps down at once, with the notices down.
    mem.set_notices_up(false);
    assert!(!a.ctx().notices_up.load(std::sync::atomic::Ordering::SeqCst));
    b.step_down(&group).await.unwrap();
    until_leads(&a, &group).await;
    // The take-back itself (after its window), not an attempt the notice
    // woke.
    let window = take_back_after(a.config().call_timeout());
    assert!(Instant::now() >= handed_at + window, "taken back early");
    assert_eq!(in_vain(&a, &group), 0, "counted in vain");
    drop(b);
}

/// A take-back is the first answered attempt after the hand-over: a win much later
/// (here: the group went out of the race during the take-back cooldown,
/// and came back after 5 ttl) is an ordinary one, not counted in vain nor
/// kept. `a` leads 10 groups, `b` wants 5 nobody else campaigns in, so `a`
/// hands groups over that nobody takes. Fails on the old code: the
/// take-back outlived the attempt, so the late win counted as a hand-over
/// nobody took, and kept the group.
#[tokio::test(start_paused = true)]
async fn a_win_long_after_a_hand_over_is_no_take_back() {
    let (_mem, a, b, group) = handing_over_to_nobody().await;
    a.set_eligible(&group, false).await.unwrap();
    sleep(TTL * 5).await;
    assert!(!leads(&a, &group));
    a.set_eligible(&group, true).await.unwrap();
    until_leads(&a, &group).await;
    assert_eq!(in_vain(&a, &group), 0, "a late win taken for a take-back");
    // The groups nobody took meanwhile were taken back, and counted.
    let others: u32 = names()
        .iter()
        .filter(|g| **g != group)
        .map(|g| in_vain(&a, g))
        .sum();
    assert!(others > 0, "no take-back counted at all");
    b.abort();
}

/// An operator's `set_eligible(true)` (already eligible) during the
/// take-back cooldown does not end it: the group is not taken back before
/// its window. `a` leads 10 groups, `b` wants 5 nobody else campaigns in,
/// so `a` hands groups over that nobody takes. Fails on the old code: the
/// command ended the wait, the cooldown's deadline was already taken, so
/// the next attempt came at once (and counted as the take-back).
#[tokio::test(start_paused = true)]
async fn a_take_back_waits_out_its_window_through_a_set_eligible() {
    let (_mem, a, b, group) = handing_over_to_nobody().await;
    let handed_at = Instant::now();
    a.set_eligible(&group, true).await.unwrap();
    until_leads(&a, &group).await;
    let window = take_back_after(a.config().call_timeout());
    assert!(
        Instant::now() >= handed_at + window,
        "taken back {:?} after the hand-over, before its window ({window:?})",
        Instant::now() - handed_at
    );
    assert_eq!(in_vain(&a, &group), 1, "the take-back counted");
    b.abort();
}

/// A take-back attempt that fails (here: the backend is down when the
/// window ends; a timed-out one may even have won on the server) does not
/// spend the take-back: the win that follows is it, counted in vain.
/// Fails on the old code: the failed attempt spent it, the win was an
/// ordinary one, and the group could be handed over at every round, each
/// costing a take-back window, unbounded by `VAIN_HAND_OVERS`.
#[tokio::test(start_paused = true)]
async fn a_failed_take_back_attempt_does_not_spend_the_take_back() {
    let (mem, a, b, group) = handing_over_to_nobody().await;
    mem.set_available(false);
    sleep(take_back_after(a.config().call_timeout()) + STEP).await;
    mem.set_available(true);
    until_leads(&a, &group).await;
    assert_eq!(
        in_vain(&a, &group),
        1,
        "the take-back was spent by a failure"
    );
    b.abort();
}
