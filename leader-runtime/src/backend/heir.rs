//! One follower per group takes a crashed leader's lease at its expiry: the
//! group's *heir*. The others ask [`HEIR_GRACE`] later.
//!
//! Why: when one instance leads thousands of groups and crashes, every
//! follower asking for every one of its groups at the expiry means one
//! refused attempt per follower and group beside the take-overs, all serial
//! on the Redis core, and the followers' own CPU on top (measured in
//! BENCHMARKS.md). With an heir, only the take-overs remain at the expiry.
//!
//! How, on Redis:
//!
//! - A follower makes its early attempt ([`AttemptBatcher::follow_at`]) a
//!   [`Heir::lead`] (half a renew interval and half an early step) before
//!   the grid point at the lease's expiry, not at it. A live leader has
//!   renewed since, so the attempt still learns the new expiry (the lease
//!   then has more than `ttl − renew_interval` left); a crashed one has
//!   not, and the attempt finds less than [`Heir::suspect_below`] left,
//!   well before the expiry.
//! - `acquire.lua` and `acquire_many.lua` (record.lua's `after_heir`): a
//!   refused attempt that finds the lease with less than `suspect_below`
//!   left (the holder missed a renewal) names the asking instance the
//!   group's heir if none is named (`{prefix}:{group}:heir`, `SET NX`, which
//!   expires `HEIR_GRACE` plus a second after the lease). To the heir it
//!   answers the lease's true PTTL; to every other follower that PTTL plus
//!   `HEIR_GRACE`, so they ask after the heir took it.
//!
//! Only *when* followers ask changes: every grant still goes through the
//! same script path, so this cannot make two leaders. A live holder whose
//! renewals were late gets an heir too; its followers then ask later
//! (refused either way). If the heir is gone as well (two crashes at once),
//! or does not ask in time, the others take the group `HEIR_GRACE` after
//! the expiry. Per group, not per holder: an heir is a follower of that
//! group, so in a fleet whose instances campaign in different groups each
//! group still has one.
//!
//! Off in memory (one process: nothing to gather), with unbatched attempts,
//! for timings where a renew interval is too short to tell a missed renewal
//! from a late one ([`Heir::for_timings`]), and with balanced leadership:
//! there a crash frees only the crashed instance's share (250 of 5,000
//! leases at 20 instances), which the followers already take within the
//! target, while the earlier attempt makes each follower ask once per
//! `ttl − renew_interval` of every leader rather than up to once per `ttl`
//! (20 × 5,000 balanced: 54.4 script calls a second with heirs, 41.4
//! without, and no faster failover; BENCHMARKS.md).
//!
//! The cost without balancing: a follower asks every leader once per
//! `ttl − renew_interval` for each of its renew phases (the model's worst
//! case before, too). At one leader of 5,000 groups and 19 followers that
//! measured fewer calls, not more (21.7 against 24.6–25.5 a second, one
//! renew phase; with the phases of a leader of thousands, `phases.rs`,
//! 27.8–30.0).
//!
//! [`AttemptBatcher::follow_at`]: super::batch::AttemptBatcher::follow_at

use std::time::Duration;

use super::batch::{ATTEMPT_SPREAD, EARLY_STEP};

/// How much later than the heir the other followers of a group ask: more
/// than the heir's attempt takes to arrive and be served at a large expiry
/// (the attempt grid and gathering, then Redis serving thousands of
/// take-overs; BENCHMARKS.md). A non-heir counts it from the earliest the
/// lease can expire ([`Expiry`]), so it may ask up to the delay of its own
/// call before that earlier (tens of ms in a burst): still well after the
/// heir's take-overs are granted.
///
/// [`Expiry`]: super::batch::Expiry
pub(crate) const HEIR_GRACE: Duration = Duration::from_millis(200);

/// The shortest renew interval with heirs: a lead of about half of it must
/// leave the early attempt on the early grid (one step ahead) with room.
const MIN_RENEW_INTERVAL: Duration = Duration::from_secs(1);

/// The timings of the heir rule for one fleet's `ttl` and `renew_interval`
/// (every instance must use the same, as for balanced leadership).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heir {
    /// How long before the grid point at a lease's expiry a follower makes
    /// its early attempt: half a renew interval (down to a whole early
    /// step) and half an early step, so always half a step off the grid.
    ///
    /// Why the half step: a leader's renewals, so its leases' expiries,
    /// sit on the early grid, a leader of thousands' phases 500 ms apart
    /// (`phases.rs`). With a lead of whole steps (2.5 s), every follower's
    /// early attempts at one phase's leases came at the instant another
    /// phase's leases expire: at a crash, 19 × 500 refused attempts met
    /// each wave's heir, whose answer, learned in such a burst, came tens
    /// of ms late (BENCHMARKS.md, "The heir asks on time").
    /// Half a step off, they come 125 ms before a wave, and between a
    /// live leader's renewals.
    ///
    /// [`Expiry`]: super::batch::Expiry
    pub(crate) lead: Duration,
    /// A lease found with less than this left missed a renewal:
    /// `ttl − 1.25 × renew_interval`. A live holder's lease never has less
    /// than `ttl − renew_interval` left, minus how late a renewal comes (a
    /// quarter interval of margin); at a follower's early attempt a
    /// crashed one has `lead` left.
    pub(crate) suspect_below: Duration,
}

impl Heir {
    /// The rule for these timings, or `None` where it cannot tell a crashed
    /// holder apart in time: a renew interval under a second, or a ttl
    /// without room below `suspect_below` for what a crashed holder's lease
    /// has left at a follower's early attempt (under the lead and a coarse
    /// grid step; the spread counted too, to be safe).
    pub(crate) fn for_timings(ttl: Duration, renew_interval: Duration) -> Option<Self> {
        if renew_interval < MIN_RENEW_INTERVAL {
            return None;
        }
        // Half a renew interval, down to a whole early step, and half a
        // step: an odd multiple of half a step, whatever the interval.
        let half = renew_interval / 2;
        let past_step = half.as_nanos() % EARLY_STEP.as_nanos();
        let lead = half - Duration::from_nanos(past_step as u64) + EARLY_STEP / 2;
        let suspect_below = ttl.checked_sub(renew_interval + renew_interval / 4)?;
        // At its early attempt a crashed holder's lease has less than the
        // lead and a coarse step left (the expiry moved back onto the
        // coarse grid, then by the lead; the instance's spread only moves
        // the attempt later, but counting it keeps a margin): it must be
        // below the line.
        let crashed_left = lead + EARLY_STEP + ATTEMPT_SPREAD;
        (suspect_below > crashed_left).then_some(Self {
            lead,
            suspect_below,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_timings_have_an_heir() {
        let heir = Heir::for_timings(Duration::from_secs(15), Duration::from_secs(5)).unwrap();
        assert_eq!(heir.lead, Duration::from_millis(2_625));
        assert_eq!(heir.suspect_below, Duration::from_millis(8_750));
        // A live leader's lease at the early attempt (more than ttl −
        // renew) is above the line, a crashed one's (about the lead) below.
        assert!(Duration::from_secs(15 - 5) > heir.suspect_below);
        assert!(heir.lead < heir.suspect_below);
    }

    /// The leases of a leader's phases expire just after points of the
    /// early grid (`RenewBatcher::align`), phases 500 ms apart: a lead of
    /// whole steps would put a follower's early attempts at one phase's
    /// leases on another phase's expiry, half a step off never.
    #[test]
    fn the_lead_is_always_half_a_step_off_the_early_grid() {
        let step = EARLY_STEP.as_nanos();
        for steps in 4..=40u32 {
            let renew = EARLY_STEP * steps;
            let heir = Heir::for_timings(renew * 3, renew).unwrap();
            assert_eq!(heir.lead.as_nanos() % step, step / 2, "{renew:?}");
            let off = heir.lead.abs_diff(renew / 2);
            assert!(off <= EARLY_STEP / 2, "{renew:?}: {:?}", heir.lead);
        }
        // Any interval: 1,234 ms has a lead of 500 + 125 ms.
        let odd = Heir::for_timings(Duration::from_millis(3_702), Duration::from_millis(1_234));
        assert_eq!(odd.unwrap().lead, Duration::from_millis(625));
    }

    #[test]
    fn short_or_tight_timings_have_none() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(Heir::for_timings(ms(3_000), ms(900)), None);
        // ttl − 1.25 × renew = 1.25 s, not above the 2.625 s lead.
        assert_eq!(Heir::for_timings(s(7) + ms(500), s(5)), None);
        // 1.9 s − 1.25 s = 650 ms: above the 625 ms lead, but a crashed
        // lease can have up to 880 ms left at the early attempt.
        assert_eq!(Heir::for_timings(ms(1_900), s(1)), None);
        assert!(Heir::for_timings(s(10), s(3)).is_some());
    }
}
