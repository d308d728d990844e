//! The groups whose last acquisition under `min_replicas` was a safe start
//! (it had to wait) that no `WAIT` confirmed, or a call with no reply to
//! judge (`InDoubt`): their next win waits one ttl (`RedisBackend::confirm`).
//!
//! A mark matters only while the lease key that acquisition may have
//! written can still be there: a later attempt of ours would re-claim it
//! and wait only for the holders the record names, which a failover may
//! have lost. That key lasts one ttl from when the script ran; the script
//! ran before the reply was read, or (no reply) before the call was given
//! up unless the request was still on its way, which one call timeout more
//! covers. After that, a win finds no lease of ours to re-claim and waits
//! for whatever the record says, as any instance's would: the mark is
//! dropped. A later answered attempt settles it sooner (`confirm` removes
//! or renews it). Without this, a runtime that named many groups over its
//! life (each forgotten after a mark) kept one entry per group for good.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The fewest entries at which expired ones are swept.
const SWEEP_AT_LEAST: usize = 64;

/// The shortest time between two sweeps made because a mark expired.
const SWEEP_PAUSE: Duration = Duration::from_millis(100);

/// Group → the instant its mark stops mattering. Expired marks are swept
/// whenever the map has doubled since the last sweep (so a mark costs
/// amortized constant time, and the map holds at most about twice the marks
/// that still matter), and by [`Self::tidy`] once the earliest mark has
/// expired (so marks of groups never named again go too).
#[derive(Debug)]
pub(super) struct UnconfirmedWaits {
    marks: HashMap<String, Instant>,
    sweep_at: usize,
    /// No later than the earliest mark's end (none: no marks).
    next_expiry: Option<Instant>,
}

impl Default for UnconfirmedWaits {
    fn default() -> Self {
        Self {
            marks: HashMap::new(),
            sweep_at: SWEEP_AT_LEAST,
            next_expiry: None,
        }
    }
}

impl UnconfirmedWaits {
    /// Mark `group` for `lasts` from now (a later mark replaces it).
    pub(super) fn mark(&mut self, group: &str, lasts: Duration) {
        let until = crate::util::clock::deadline_in(lasts);
        match self.marks.get_mut(group) {
            Some(at) => *at = (*at).max(until),
            None => {
                self.marks.insert(group.to_owned(), until);
            }
        }
        self.next_expiry = Some(self.next_expiry.map_or(until, |e| e.min(until)));
        if self.marks.len() >= self.sweep_at {
            self.sweep();
        }
    }

    /// Sweep if a mark may have expired (at most every [`SWEEP_PAUSE`]):
    /// called at every judged acquisition, so marks nobody asks about again
    /// go at the next one after they expired.
    pub(super) fn tidy(&mut self) {
        if self.next_expiry.is_some_and(|e| e <= Instant::now()) {
            self.sweep();
        }
    }

    /// Whether `group`'s next win must wait one ttl.
    pub(super) fn contains(&self, group: &str) -> bool {
        self.marks
            .get(group)
            .is_some_and(|until| Instant::now() < *until)
    }

    /// The group's acquisition was settled: no mark.
    pub(super) fn remove(&mut self, group: &str) {
        self.marks.remove(group);
        if self.marks.is_empty() {
            self.marks.shrink_to(SWEEP_AT_LEAST);
            self.next_expiry = None;
        }
    }

    /// Drop every mark that no longer matters.
    pub(super) fn sweep(&mut self) {
        let now = Instant::now();
        self.marks.retain(|_, until| now < *until);
        self.marks.shrink_to(self.marks.len().max(SWEEP_AT_LEAST));
        self.sweep_at = self.marks.len().saturating_mul(2).max(SWEEP_AT_LEAST);
        self.next_expiry = self
            .marks
            .values()
            .min()
            .map(|e| (*e).max(now + SWEEP_PAUSE));
    }

    /// How many marks are held (expired ones not yet swept included).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.marks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mark counts for its whole life and not after; a settled group
    /// loses it; the map never holds much more than the live marks.
    #[tokio::test(start_paused = true)]
    async fn marks_count_while_they_matter_and_are_swept_after() {
        let life = Duration::from_secs(2);
        let mut waits = UnconfirmedWaits::default();
        waits.mark("a", life);
        tokio::time::advance(life - Duration::from_millis(1)).await;
        waits.tidy();
        assert!(waits.contains("a"), "still within its life");
        waits.mark("b", life);
        waits.remove("b");
        assert!(!waits.contains("b"), "settled");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!waits.contains("a"), "expired");
        waits.tidy();
        assert_eq!(waits.len(), 0);
        // A stream of marks, each living for a fraction of the stream:
        // the map stays near the live ones.
        for i in 0..10_000 {
            waits.mark(&format!("g{i}"), Duration::from_millis(50));
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(
                waits.len() <= 2 * 50 + SWEEP_AT_LEAST,
                "{i}: {}",
                waits.len()
            );
        }
    }
}
