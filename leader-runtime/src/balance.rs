//! Balanced leadership (opt-in: [`ConfigBuilder::balance_leadership`]): each
//! of N live instances leads its share of the G groups, ⌊G/N⌋ or ⌈G/N⌉.
//!
//! Membership comes from the backend: a sorted set `{prefix}:members` of
//! instance ids scored by when they expire, which every instance refreshes
//! once per `renew_interval` (one call) and leaves on shutdown, before its
//! groups release (so the others, asking for a fresh round on the release
//! notices, take them at once). A crashed instance no longer counts once it
//! missed a refresh (`renew_interval` + `call_timeout` after its last one;
//! with the default timings, before its leases expire): the groups it led
//! are taken by instances that count without it, with no hand-over churn
//! while its entry waits for its expiry (`ttl`). The instances sorted by id
//! take the shares in turn: the first `G mod N` lead ⌈G/N⌉, the others ⌊G/N⌋,
//! so the shares add up to G and every instance computes the same ones.
//!
//! Leadership moves only through the ordinary protocol, so balancing never
//! weakens safety: a leader over its share hands one group over as
//! `step_down` does (drain the gated runs, end the view, release; then stay
//! out of that group's race for one `ttl`), at most [`MOVES_PER_ROUND`] per
//! `renew_interval`; a follower at or over its share lets a released group
//! go to an instance below its share first ([`SHARE_GRACE`]). Expiries
//! (crashes) are taken by whoever comes first, and the next rounds even the
//! shares out. Every instance must join the same groups and use the same
//! `ttl` (freshness is read from the entries' expiry).
//!
//! [`ConfigBuilder::balance_leadership`]: crate::ConfigBuilder::balance_leadership

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::{within, Backend};

/// A leader hands over at most this many groups per membership round.
pub(crate) const MOVES_PER_ROUND: usize = 100;

/// After a release notice, a follower at or over its share waits this long
/// before trying, so that an instance below its share takes the group — at
/// most: it asks for a membership round, and one that puts it below its
/// share (the releaser left) ends the wait.
pub(crate) const SHARE_GRACE: Duration = Duration::from_millis(50);

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
    /// Groups this runtime campaigns in.
    groups: usize,
    /// Groups it holds the lease of.
    leading: usize,
    /// Of those, being handed over for the balance.
    shedding: usize,
    /// Live members by id (this instance included once it joined).
    members: Vec<String>,
    /// Hand-overs left in this round.
    moves_left: usize,
}

impl State {
    /// This instance's share: ⌊G/N⌋, plus one for the first `G mod N`
    /// members by id. Before the first round: every group.
    fn share(&self, me: &str) -> usize {
        let n = self.members.len();
        let Some(rank) = self.members.iter().position(|m| m == me) else {
            return self.groups;
        };
        self.groups / n + usize::from(rank < self.groups % n)
    }
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

    /// An election started (`true`) or ended (`false`).
    pub(crate) fn campaigning(&self, yes: bool) {
        let mut s = self.state();
        if yes {
            s.groups += 1;
        } else {
            s.groups = s.groups.saturating_sub(1);
        }
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

    /// Whether a leader should hand its group over now: this instance leads
    /// more than its share (not counting hand-overs under way), and the
    /// round's moves are not used up. Counts the move when it says yes.
    pub(crate) fn try_shed(&self) -> bool {
        let mut s = self.state();
        let share = s.share(&self.me);
        if s.leading - s.shedding.min(s.leading) > share && s.moves_left > 0 {
            s.shedding += 1;
            s.moves_left -= 1;
            true
        } else {
            false
        }
    }

    /// Whether this instance leads its share or more already.
    pub(crate) fn at_share(&self) -> bool {
        let s = self.state();
        s.leading >= s.share(&self.me)
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

    /// A membership round: the live members' ids; `new_moves`: the
    /// round's hand-overs start again (once per `renew_interval`, not on
    /// the rounds followers ask for).
    pub(crate) fn set_members(&self, mut members: Vec<String>, new_moves: bool) {
        members.sort();
        members.dedup();
        let mut s = self.state();
        s.members = members;
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
        loop {
            let refresh = within(
                "members",
                limit,
                backend.members(&key, &balance.me, ttl, fresh),
            );
            let round = tokio::select! {
                _ = stop.cancelled() => break,
                round = refresh => round,
            };
            match round {
                Ok(members) => {
                    failing = false;
                    let now = tokio::time::Instant::now();
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
