//! Balanced leadership (opt-in: [`ConfigBuilder::balance_leadership`]): each
//! of N live instances leads its share of the groups — ⌊G/N⌋ or ⌈G/N⌉ when
//! they all campaign in the same G groups.
//!
//! Membership comes from the backend: a hash `{prefix}:balance` of instance
//! id → "expiry leading campaigns" (one key: one hash slot on a cluster),
//! which every instance refreshes once per `renew_interval` (one call),
//! publishing how many groups it leads and how many it campaigns in
//! (eligible ones, `once:` groups left out), and leaves on shutdown, before
//! its groups release (so the others, asking for a fresh round on the
//! release notices, take them at once). A crashed instance no longer counts
//! once it missed a refresh (`renew_interval` + `call_timeout` after its
//! last one; with the default timings, before its leases expire): the
//! groups it led are taken by instances that count without it, with no
//! hand-over churn while its entry waits for its expiry (`ttl`).
//!
//! The shares come from figures every instance reads the same: the groups
//! to share are the most of the total led and the largest campaign count
//! (so a group between leaders is still counted), split as evenly as the
//! members' campaign counts allow — a member gets at most the number of
//! groups it campaigns in, the rest is split over the others (water
//! filling); the members sorted by id take the odd groups in turn. With the
//! same G groups everywhere that is ⌊G/N⌋ or ⌈G/N⌉, the first `G mod N` by
//! id taking ⌈G/N⌉.
//!
//! Leadership moves only through the ordinary protocol, so balancing never
//! weakens safety: a leader over its share, while another member leads less
//! than its share, hands one group over as `step_down` does (drain the gated
//! runs, end the view, release), at most [`MOVES_PER_ROUND`] per
//! `renew_interval`, and only a group with no gated body running: the leader
//! stops admitting gated runs and reads the exact count, and finding one in
//! flight (one that started as the hand-over began included) admits again
//! and keeps the group until a later round, so a hand-over for the balance
//! never waits for a body (a gated call in that instant, one `membarrier`,
//! is refused as during any hand-over). A follower below its share takes a
//! released group at once; one at or over its share lets it go to an
//! instance below its share first: for [`SHARE_GRACE`], or — while a member
//! leads more than its share, so the release may be a hand-over for the
//! balance — for [`hold_for`], ended by a fresh membership round that puts
//! it below its share. Instances do not know which groups the others
//! campaign in, so a hand-over may find nobody below its share who wants the
//! group: then the leader that handed it over takes it back after
//! [`take_back_after`] (instead of the one-`ttl` cooldown of a `step_down`):
//! the first attempt then that wins or finds the group held decides the
//! take-back (a failed or paused attempt does not spend it: a failed one
//! may have won on the server, and an uncounted win after it would let
//! every round hand the group over again), and no later one (a win after
//! the group was out of the race or found held is an ordinary one), nor
//! one after another instance's release notice (it held the group). Besides
//! that notice, only leaving the race ends the window early (not a
//! `set_eligible(true)`). A group taken back is kept while the fleet's
//! layout (the other members below their share and their campaign counts:
//! those that could take a group) stays the same — unless a member below its share
//! campaigns in every group (as when all campaign in the same groups): that
//! one wanted the group and could not take it then (its release notices
//! down, a fault), so a later round hands it over again, up to
//! [`VAIN_HAND_OVERS`] times per layout.
//!
//! A take-back counts as in vain only if nobody held the group since the
//! release: its acquire finds no earlier holder's time to wait out, and the
//! token issued before its own is still the one released (so a holder that
//! released cleanly is seen even when its release notice was lost).
//!
//! So a group is without a leader for at most that window per hand-over, an
//! instance hands a group over in vain a bounded number of times per layout, and
//! the moves stop: the shares settle, or stay uneven where only a chain of
//! moves through a third instance could even them out. (A follower at its
//! share whose attempt was already in flight when a group was released may
//! still win it; it is then over its share and hands over in turn, with the
//! same bounds.) `once:` groups are never handed over. Expiries (crashes)
//! are taken by whoever comes first, and the next rounds even the shares
//! out. Every instance must use the same `ttl` (freshness is read from the
//! entries' expiry).
//!
//! [`ConfigBuilder::balance_leadership`]: crate::ConfigBuilder::balance_leadership

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::{within, Backend, Counts, Member};

/// A leader hands over at most this many groups per membership round.
pub(crate) const MOVES_PER_ROUND: usize = 100;

/// A group taken back after this many hand-overs in vain at one layout is
/// kept even though a member below its share campaigns in every group (one
/// that never takes any: wedged).
pub(crate) const VAIN_HAND_OVERS: u32 = 3;

/// After a release notice, a follower at or over its share waits this long
/// before trying, so that an instance below its share takes the group — at
/// most: it asks for a membership round, and one that puts it below its
/// share (the releaser left) ends the wait.
pub(crate) const SHARE_GRACE: Duration = Duration::from_millis(50);

/// After a hand-over for the balance, the leader that handed a group over
/// campaigns for it again this long after its release (if nobody took it),
/// instead of staying out for one `ttl`: enough for a member below its
/// share to hear the release notice, wait out a share grace on a stale
/// round, ask for a fresh one and acquire (`call_timeout` bounds each call).
pub(crate) fn take_back_after(call_timeout: Duration) -> Duration {
    SHARE_GRACE * 2 + call_timeout
}

/// How long a follower at or over its share stays away from a released
/// group while another member leads more than its share (the release may be
/// a hand-over for the balance): longer than [`take_back_after`], so that
/// the group goes to a member below its share or back to the leader that
/// handed it over, never to a third instance at its share (which would then
/// be over its share and hand over in turn).
pub(crate) fn hold_for(call_timeout: Duration) -> Duration {
    take_back_after(call_timeout) + SHARE_GRACE
}

/// What one runtime knows of the balance.
pub(crate) struct Balance {
    me: String,
    state: Mutex<State>,
    /// A new membership round: leaders over their share look again.
    pub(crate) round: Notify,
    /// Asks the heartbeat for a round now (a follower at its share saw a
    /// release: the releaser may have left).
    refresh: Notify,
    /// This instance left the membership (or gave up trying): its
    /// shutdown releases may go.
    left: CancellationToken,
}

#[derive(Default)]
struct State {
    /// Groups this runtime campaigns in (eligible, not `once:`).
    campaigns: usize,
    /// Groups it holds the lease of (not `once:`).
    leading: usize,
    /// Of those, being handed over for the balance.
    shedding: usize,
    /// What the last membership round says (none before the first).
    round: Option<Round>,
    /// Hand-overs left in this round.
    moves_left: usize,
    /// The other members below their share and their campaign counts, by
    /// id: a group handed over in vain is kept while this stays the same.
    /// Not the whole fleet: a member at its share takes no hand-over, and
    /// a change of its groups (ones that come and go) would make every
    /// leader over its share hand its kept groups over again, each round.
    layout: Vec<(String, u32)>,
    /// Counts the changes of `layout`.
    epoch: u64,
}

/// This instance's view of one membership round.
struct Round {
    /// Its share (`None`: it is not among the live members, e.g. its own
    /// refresh is not listed yet).
    share: Option<usize>,
    /// Another member leads fewer groups than its share (so it campaigns in
    /// more than it leads: it could take one).
    below: bool,
    /// Another member leads more than its share (a hand-over for the
    /// balance may be under way).
    over: bool,
    /// Another member below its share campaigns in as many groups as there
    /// are to share: in every group, as far as the counts tell (always so
    /// when every instance campaigns in the same groups), so a group handed
    /// over in vain was not one it does not want — it could not take it
    /// then (its release notices down, a fault).
    below_in_all: bool,
}

/// How many groups there are to share: the most of the total led and the
/// largest campaign count (a group between leaders still counts).
fn to_share(members: &[Member]) -> u64 {
    let led: u64 = members.iter().map(|m| u64::from(m.counts.leading)).sum();
    let most = members.iter().map(|m| u64::from(m.counts.campaigns)).max();
    led.max(most.unwrap_or(0))
}

/// The members' shares (`members` sorted by id): the groups to share —
/// the most of the total led and the largest campaign count — split as
/// evenly as possible with no member above its campaign count (water
/// filling), the first by id of the uncapped members taking the odd ones.
/// Equal inputs give equal shares on every instance.
fn shares(members: &[Member]) -> Vec<usize> {
    let cap = |i: usize| u64::from(members[i].counts.campaigns);
    let mut left = to_share(members);
    let mut shares = vec![0u64; members.len()];
    let mut open: Vec<usize> = (0..members.len()).collect();
    while !open.is_empty() {
        let k = open.len() as u64;
        // Those who campaign in no more than an even split take all theirs.
        let (capped, rest): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| cap(i) * k <= left);
        if capped.is_empty() {
            for (rank, &i) in open.iter().enumerate() {
                shares[i] = left / k + u64::from((rank as u64) < left % k);
            }
            break;
        }
        for i in capped {
            shares[i] = cap(i);
            left = left.saturating_sub(cap(i));
        }
        open = rest;
    }
    shares
        .into_iter()
        .map(|s| usize::try_from(s).unwrap_or(usize::MAX))
        .collect()
}

impl Balance {
    pub(crate) fn new(me: &str) -> Self {
        Self {
            me: me.to_owned(),
            state: Mutex::new(State::default()),
            round: Notify::new(),
            refresh: Notify::new(),
            left: CancellationToken::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An election started campaigning (`true`: an eligible group) or
    /// stopped (`false`: ended, or out of the race).
    pub(crate) fn campaigning(&self, yes: bool) {
        let mut s = self.state();
        if yes {
            s.campaigns += 1;
        } else {
            s.campaigns = s.campaigns.saturating_sub(1);
        }
        drop(s);
        // Publish it soon (many changes at once make one round): an
        // instance that starts its groups after its first refresh would
        // otherwise count as campaigning in none for one renew interval.
        self.ask_round();
    }

    /// A leadership began (the lease is ours).
    pub(crate) fn won(&self) {
        self.state().leading += 1;
    }

    /// A leadership ended; `shed`: it was handed over for the balance.
    pub(crate) fn ended(&self, shed: bool) {
        let mut s = self.state();
        s.leading = s.leading.saturating_sub(1);
        if shed {
            s.shedding = s.shedding.saturating_sub(1);
        }
    }

    /// What this instance publishes with its next refresh.
    fn counts(&self) -> Counts {
        let s = self.state();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Counts {
            leading: count(s.leading),
            campaigns: count(s.campaigns),
        }
    }

    /// Whether a leader should hand its group over now (`Some`): this
    /// instance leads more than its share (not counting hand-overs under
    /// way), another member leads less than its share, and the round's
    /// moves are not used up. Counts the move when it says yes. The answer
    /// says whether to keep the group if nobody takes it and it is taken
    /// back: not when a member below its share campaigns in every group
    /// (then it wanted the group and could not take it this time — its
    /// release notices down, a fault — and a later round hands over again).
    pub(crate) fn try_shed(&self) -> Option<bool> {
        let mut s = self.state();
        let Some(Round {
            share: Some(share),
            below: true,
            below_in_all,
            ..
        }) = s.round
        else {
            return None;
        };
        if s.leading - s.shedding.min(s.leading) > share && s.moves_left > 0 {
            s.shedding += 1;
            s.moves_left -= 1;
            Some(!below_in_all)
        } else {
            None
        }
    }

    /// A hand-over [`try_shed`](Self::try_shed) allowed did not happen (a
    /// gated body was in flight after all): the move is not spent.
    pub(crate) fn unshed(&self) {
        let mut s = self.state();
        s.shedding = s.shedding.saturating_sub(1);
        s.moves_left = (s.moves_left + 1).min(MOVES_PER_ROUND);
    }

    /// Whether this instance leads its share or more already.
    pub(crate) fn at_share(&self) -> bool {
        let s = self.state();
        let share = s.round.as_ref().and_then(|r| r.share);
        share.is_some_and(|share| s.leading >= share)
    }

    /// Whether another member leads more than its share: a release may be
    /// a hand-over for the balance, meant for a member below its share.
    pub(crate) fn others_over(&self) -> bool {
        self.state().round.as_ref().is_some_and(|r| r.over)
    }

    /// The fleet's layout (the other members below their share and their
    /// campaign counts): a number that changes when it does.
    pub(crate) fn epoch(&self) -> u64 {
        self.state().epoch
    }

    /// Ask the heartbeat for a membership round now; many asks before it
    /// runs make one round.
    pub(crate) fn ask_round(&self) {
        self.refresh.notify_one();
    }

    /// Until this instance has left the membership (after the runtime
    /// stopped), at most `limit`: a clean leaver's releases go after its
    /// leave, so the next round of the others already counts without it.
    pub(crate) async fn until_left(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.left.cancelled()).await;
    }

    /// The membership has failed for longer than the others count this
    /// instance: no balancing (as before the first round) until it works
    /// again — a stale round would keep this instance at a share and
    /// holding off released groups for good.
    fn forget_round(&self) {
        self.state().round = None;
    }

    /// A membership round: the live members and what they published;
    /// `new_moves`: the round's hand-overs start again (once per
    /// `renew_interval`, not on the rounds followers ask for).
    pub(crate) fn set_members(&self, mut members: Vec<Member>, new_moves: bool) {
        members.sort_by(|a, b| a.id.cmp(&b.id));
        members.dedup_by(|a, b| a.id == b.id);
        let shares = shares(&members);
        let me = members.iter().position(|m| m.id == self.me);
        let total = to_share(&members);
        let others = || {
            members
                .iter()
                .zip(&shares)
                .enumerate()
                .filter(move |(i, _)| Some(*i) != me)
                .map(|(_, (m, &share))| (m.counts, share))
        };
        let round = Round {
            share: me.map(|i| shares[i]),
            below: others().any(|(c, share)| (c.leading as usize) < share),
            over: others().any(|(c, share)| (c.leading as usize) > share),
            below_in_all: others()
                .any(|(c, share)| (c.leading as usize) < share && u64::from(c.campaigns) >= total),
        };
        let layout: Vec<(String, u32)> = members
            .iter()
            .zip(&shares)
            .enumerate()
            .filter(|&(i, (m, &share))| Some(i) != me && (m.counts.leading as usize) < share)
            .map(|(_, (m, _))| (m.id.clone(), m.counts.campaigns))
            .collect();
        let mut s = self.state();
        s.round = Some(round);
        if layout != s.layout {
            s.layout = layout;
            s.epoch += 1;
        }
        if new_moves {
            s.moves_left = MOVES_PER_ROUND;
        }
        drop(s);
        self.round.notify_waiters();
    }
}

/// Refresh this instance's membership every `every` (entries live `ttl`;
/// members that refreshed within `every + limit` count), feeding each round
/// to `balance`, and at once when a follower asks; until `stop`, then leave.
pub(crate) fn spawn_heartbeat(
    backend: Backend,
    key: String,
    balance: Arc<Balance>,
    ttl: Duration,
    every: Duration,
    limit: Duration,
    stop: CancellationToken,
) {
    // A live member's refreshes land at most `every` + one call apart.
    let fresh = (every + limit).min(ttl);
    tokio::spawn(async move {
        let mut failing = false;
        let mut moves_from: Option<tokio::time::Instant> = None;
        let mut last_ok: Option<tokio::time::Instant> = None;
        loop {
            let refresh = within(
                "members",
                limit,
                backend.members(&key, &balance.me, ttl, fresh, balance.counts()),
            );
            let round = tokio::select! {
                _ = stop.cancelled() => break,
                round = refresh => round,
            };
            match round {
                Ok(members) => {
                    failing = false;
                    let now = tokio::time::Instant::now();
                    last_ok = Some(now);
                    let new_moves = moves_from.is_none_or(|t| now >= t + every);
                    if new_moves {
                        moves_from = Some(now);
                    }
                    balance.set_members(members, new_moves);
                }
                // The last round stays in force meanwhile.
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "membership refresh failed; balancing on the last known members");
                }
                Err(e) => tracing::debug!(error = %e, "membership refresh failed again"),
            }
            // Failing for longer than the others count this instance: its
            // last round no longer describes the fleet.
            if failing && last_ok.is_some_and(|t| t.elapsed() >= fresh) {
                last_ok = None;
                balance.forget_round();
                tracing::warn!("membership refresh failing for longer than the others count this instance: not balancing until it works again");
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
                _ = balance.refresh.notified() => {}
            }
        }
        if let Err(e) = within("members", limit, backend.leave(&key, &balance.me)).await {
            tracing::debug!(error = %e, "could not leave the membership; it expires by itself");
        }
        balance.left.cancel();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(members: &[(&str, u32, u32)]) -> Vec<Member> {
        members
            .iter()
            .map(|&(id, leading, campaigns)| Member {
                id: id.to_owned(),
                counts: Counts { leading, campaigns },
            })
            .collect()
    }

    #[test]
    fn the_same_groups_everywhere_split_evenly_by_id() {
        // 10 over 3, whoever leads what (and while some are between leaders).
        for leading in [(10, 0, 0), (4, 3, 3), (0, 0, 0), (3, 3, 3)] {
            let (a, b, c) = leading;
            let f = fleet(&[("a", a, 10), ("b", b, 10), ("c", c, 10)]);
            assert_eq!(shares(&f), [4, 3, 3], "{leading:?}");
        }
    }

    #[test]
    fn a_member_gets_no_more_than_it_campaigns_in() {
        // b campaigns in 2 of a's 10.
        assert_eq!(shares(&fleet(&[("a", 10, 10), ("b", 0, 2)])), [8, 2]);
        // c in 1 of the 10 a and b share.
        let f = fleet(&[("a", 5, 10), ("b", 5, 10), ("c", 0, 1)]);
        assert_eq!(shares(&f), [5, 4, 1]);
        // A member that campaigns in nothing (it has not called any group
        // yet, or made them all not eligible) gets nothing.
        assert_eq!(shares(&fleet(&[("a", 10, 10), ("b", 0, 0)])), [10, 0]);
    }

    #[test]
    fn disjoint_groups_count_what_is_led() {
        // a campaigns in g0..g4, b in g5..g9: 10 groups, 5 each.
        assert_eq!(shares(&fleet(&[("a", 5, 5), ("b", 5, 5)])), [5, 5]);
        // More led than anyone campaigns in: everyone at their count.
        assert_eq!(shares(&fleet(&[("a", 3, 3), ("b", 9, 9)])), [3, 9]);
    }

    #[test]
    fn no_members_no_shares() {
        assert!(shares(&[]).is_empty());
        assert_eq!(shares(&fleet(&[("a", 0, 0)])), [0]);
    }

    #[test]
    fn try_shed_needs_a_member_below_its_share() {
        let balance = Balance::new("a");
        for _ in 0..10 {
            balance.campaigning(true);
            balance.won();
        }
        // b campaigns in nothing: nobody could take a group.
        balance.set_members(fleet(&[("a", 10, 10), ("b", 0, 0)]), true);
        assert_eq!(balance.try_shed(), None);
        assert!(balance.at_share());
        // b campaigns in 2: a hands over 2 (its excess), then stops; b
        // wants only 2 of the 10, so what it did not take is kept.
        let epoch = balance.epoch();
        balance.set_members(fleet(&[("a", 10, 10), ("b", 0, 2)]), true);
        assert_ne!(balance.epoch(), epoch, "the layout changed");
        assert_eq!(balance.try_shed(), Some(true));
        assert_eq!(balance.try_shed(), Some(true));
        assert_eq!(balance.try_shed(), None);
        assert!(!balance.others_over());
        // The same layout: the same epoch.
        let epoch = balance.epoch();
        balance.set_members(fleet(&[("b", 1, 2), ("a", 9, 10)]), false);
        assert_eq!(balance.epoch(), epoch);
        // b campaigns in every group: a group it did not take is handed
        // over again later.
        balance.set_members(fleet(&[("a", 10, 10), ("b", 0, 10)]), true);
        balance.ended(true);
        balance.ended(true);
        assert_eq!(balance.try_shed(), Some(false));
    }
}

/// The heartbeat on a real Redis whose membership key turns into another
/// type (or whose ACL stops allowing the script): every refresh fails.
#[cfg(test)]
mod failing_tests {
    use std::time::Duration;

    use leader_testkit::RedisServer;
    use tokio::time::{sleep, Instant};

    use crate::{Config, Runtime};

    /// Once the refreshes have failed for longer than the others still
    /// count this instance, it balances no more (as before its first
    /// round): a stale round would keep it at a share and holding off
    /// released groups for good. Fails when the last round stays in force.
    #[tokio::test]
    async fn a_membership_that_keeps_failing_means_no_balancing() {
        let server = RedisServer::start().await.unwrap();
        let rt = Runtime::new(
            Config::builder()
                .redis_url(server.url())
                .ttl(Duration::from_millis(1500))
                .renew_interval(Duration::from_millis(300))
                .instance_id("a")
                .balance_leadership(true)
                .build()
                .unwrap(),
        )
        .unwrap();
        for g in ["g0", "g1"] {
            rt.is_leader(g);
        }
        let balance = rt.ctx().balance.clone().unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while !balance.at_share() {
            assert!(Instant::now() < end, "never at its share");
            sleep(Duration::from_millis(10)).await;
        }
        server
            .cmd(&["SET", "leader:balance", "junk"])
            .await
            .unwrap();
        // The others stop counting it `renew_interval + call_timeout` after
        // its last refresh; a round may have been under way.
        let cfg = rt.config();
        sleep(cfg.renew_interval() * 3 + cfg.call_timeout() * 2).await;
        assert!(!balance.at_share(), "still balancing on a stale round");
        assert!(!balance.others_over());
        // Elections go on.
        assert!(rt.is_leader("g0") && rt.is_leader("g1"));
        rt.shutdown().await;
    }
}
