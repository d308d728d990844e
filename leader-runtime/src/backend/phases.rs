//! Which renew phase each lease of a runtime takes (see
//! [`RenewBatcher::align`](super::batch::RenewBatcher::align)).
//!
//! A runtime renews its leases at its own phase of the renew interval, so
//! that they go to Redis in a few calls. A leader of thousands of groups
//! spreads them over a few phases instead, one per [`PHASE_LEASES`]: when
//! it crashes, its leases then expire in waves of a few hundred, not all at
//! one instant, and are taken over sooner after their expiry
//! (BENCHMARKS.md).
//!
//! The phases sit on fixed slots two early steps (500 ms) apart, counted
//! from the runtime's own phase: waves of a crash come at least that far
//! apart, after the followers that are not a wave's heirs asked
//! (`HEIR_GRACE` after it, 200 ms), not in the middle of it (waves 250 ms
//! apart measured 53–92 ms median after the expiry against 35–62 ms).
//! Which slot a group takes depends on its name's hash and on how many
//! phases are in use: a jump consistent hash picks one of `n` buckets, so
//! that when `n` grows by one only about `1/(n+1)` of the groups move (each
//! move costs that group one early renewal), and bucket `b` always sits on
//! the same slot, `b`'s place in a spread order of the slots (0, 1/2, 1/4,
//! 3/4, ... of the interval): with few phases in use they lie far apart,
//! and always at least a slot.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::batch::{EARLY_STEP, MAX_GROUPS};

/// How many leases share one renew phase, at most about: four fifths of a
/// call ([`MAX_GROUPS`]), room for the hash's unevenness, so that a phase's
/// renewals, and each follower's attempts at them, mostly fit in one call
/// (until the phases run out of slots).
pub(crate) const PHASE_LEASES: usize = MAX_GROUPS * 4 / 5;

/// Slots of phases are this many early steps apart.
const SLOT_STEPS: u128 = 2;

/// The count of leases a runtime holds: one [`Holding`] each.
#[derive(Clone, Default)]
pub(crate) struct Leading(Arc<AtomicUsize>);

impl Leading {
    /// Count one lease until the guard is dropped.
    pub(crate) fn holding(&self) -> Holding {
        self.0.fetch_add(1, Ordering::Relaxed);
        Holding(self.0.clone())
    }

    /// How many leases are counted now.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Where in a renew interval of `every_ns` the phase of the group whose
    /// name hashes to `hash()` lies, in ns after the runtime's own phase
    /// (always a multiple of two early steps; 0 for a runtime of
    /// [`PHASE_LEASES`] leases or fewer, or an interval under a second:
    /// then the name is not hashed).
    pub(crate) fn offset(&self, hash: impl FnOnce() -> u64, every_ns: u128) -> u128 {
        let slot_ns = SLOT_STEPS * EARLY_STEP.as_nanos();
        let slots = (every_ns / slot_ns).max(1);
        let wanted = self.count().div_ceil(PHASE_LEASES).max(1);
        // Both under 2^32: `slots` for intervals under 68 years (longer
        // ones get that many slots), `n` always.
        let slots = u32::try_from(slots).unwrap_or(u32::MAX);
        let n = u32::try_from(wanted).unwrap_or(u32::MAX).min(slots);
        if n <= 1 {
            return 0;
        }
        u128::from(spread_slot(jump(hash(), n), slots)) * slot_ns
    }
}

/// One lease counted in a runtime's [`Leading`] while it lives: dropped
/// with the leadership, or with its election's task.
pub(crate) struct Holding(Arc<AtomicUsize>);

impl Drop for Holding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Jump consistent hash (Lamping and Veach, 2014): a bucket in `0..n` for
/// `key` (`n` ≥ 1; 0 for `n` = 0), such that going from `n` to `n + 1`
/// buckets moves only the keys that land in the new one.
fn jump(mut key: u64, n: u32) -> u32 {
    let (mut bucket, mut next) = (0u64, 0u64);
    while next < u64::from(n) {
        bucket = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        let scale = f64::from(1u32 << 31) / ((key >> 33) as f64 + 1.0);
        // `scale` ≥ 1, so `next` > `bucket`: at most `n` rounds (about
        // ln n expected), and `next` < 2^63.
        next = ((bucket + 1) as f64 * scale) as u64;
    }
    bucket as u32
}

/// The slot (of `slots`) that bucket `b` sits on: the `b`-th distinct
/// slot in the van der Corput order (0, 1/2, 1/4, 3/4, 1/8, ... of the
/// interval), so that a bucket keeps its slot when the number of buckets
/// changes, and the first few are spread apart. `b` ≥ `slots` wraps. No
/// allocation, at most `2 b` steps: with `p` the largest power of two up
/// to `slots`, the first `p` fractions (multiples of `1/p`) fall on `p`
/// different slots, in order; each of the next `p` (odd multiples of
/// `1/2p`) on a different one, new unless a multiple of `1/p` took it.
fn spread_slot(b: u32, slots: u32) -> u32 {
    let slots = u64::from(slots.max(1));
    let b = u64::from(b) % slots;
    let p = 1u64 << (63 - slots.leading_zeros());
    let slot = |i: u64| (u64::from((i as u32).reverse_bits()) * slots) >> 32;
    if b < p {
        return slot(b) as u32;
    }
    // Whether slot `s` holds a multiple of 1/p: the first one at or past
    // its start, j / p with j = ⌈s p / slots⌉, lies before its end.
    let taken = |s: u64| (s * p).div_ceil(slots) * slots < (s + 1) * p;
    let mut seen = p;
    for i in p..2 * p {
        let s = slot(i);
        if !taken(s) {
            if seen == b {
                return s as u32;
            }
            seen += 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_first_buckets_are_spread_over_the_slots() {
        let order: Vec<u32> = (0..10).map(|b| spread_slot(b, 10)).collect();
        assert_eq!(order, [0, 5, 2, 7, 1, 6, 3, 8, 4, 9]);
        // A permutation, for any number of slots.
        for slots in [1, 2, 3, 7, 10, 16, 17, 100] {
            let all: BTreeSet<u32> = (0..slots).map(|b| spread_slot(b, slots)).collect();
            assert_eq!(all, (0..slots).collect(), "{slots}");
        }
        assert_eq!(spread_slot(12, 10), spread_slot(2, 10));
        assert_eq!(spread_slot(0, 0), 0);
        // The same as the plain definition: the b-th distinct slot of the
        // van der Corput fractions.
        let plain = |b: u32, slots: u32| {
            let mut found = Vec::new();
            for i in 0..=u32::MAX {
                let s = ((u64::from(i.reverse_bits()) * u64::from(slots)) >> 32) as u32;
                if !found.contains(&s) {
                    if found.len() == b as usize {
                        return s;
                    }
                    found.push(s);
                }
            }
            unreachable!()
        };
        for slots in (1..300).chain([1_000, 1_025, 7_200]) {
            for b in 0..slots.min(300) {
                assert_eq!(spread_slot(b, slots), plain(b, slots), "{b} of {slots}");
            }
        }
        assert!(spread_slot(3, u32::MAX) < u32::MAX);
    }

    #[test]
    fn one_more_bucket_moves_only_the_keys_it_takes() {
        let keys: Vec<u64> = (0..20_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        for n in 1..12 {
            let moved = keys
                .iter()
                .filter(|&&k| jump(k, n) != jump(k, n + 1))
                .count();
            let into_new = keys.iter().filter(|&&k| jump(k, n + 1) == n).count();
            assert_eq!(moved, into_new, "{n}");
            // About 1/(n+1) of them.
            let expected = keys.len() / (n as usize + 1);
            assert!(moved.abs_diff(expected) < expected / 5, "{n}: {moved}");
        }
        assert_eq!(jump(7, 1), 0);
        assert_eq!(jump(7, 0), 0);
        assert!(jump(u64::MAX, u32::MAX) < u32::MAX);
    }

    #[test]
    fn offsets_follow_the_count() {
        let leading = Leading::default();
        let every = 5_000_000_000u128;
        let slot = 500_000_000u128;
        let keys = || (0..5_000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let offsets = |l: &Leading| keys().map(|k| l.offset(|| k, every)).collect::<Vec<_>>();
        let guards: Vec<Holding> = (0..PHASE_LEASES).map(|_| leading.holding()).collect();
        assert!(offsets(&leading).iter().all(|&o| o == 0));
        let more: Vec<Holding> = (0..PHASE_LEASES).map(|_| leading.holding()).collect();
        // Two phases: the runtime's own and the one half an interval on.
        let two = offsets(&leading);
        let used: BTreeSet<u128> = two.iter().copied().collect();
        assert_eq!(used, BTreeSet::from([0, 5 * slot]));
        // A third phase moves only the groups that go to it.
        let extra: Vec<Holding> = (0..PHASE_LEASES).map(|_| leading.holding()).collect();
        let three = offsets(&leading);
        for (a, b) in two.iter().zip(&three) {
            assert!(a == b || *b == 2 * slot, "{a} -> {b}");
        }
        drop((guards, more, extra));
        assert_eq!(leading.count(), 0);
        // Capped at one slot per 500 ms, and intervals under one slot.
        let many: Vec<Holding> = (0..100_000).map(|_| leading.holding()).collect();
        let capped: BTreeSet<u128> = keys().map(|k| leading.offset(|| k, every)).collect();
        assert_eq!(capped, (0..10).map(|i| i * slot).collect());
        assert!(keys().all(|k| leading.offset(|| k, 300_000_000) == 0));
        assert!(keys().all(|k| leading.offset(|| k, u128::from(u64::MAX)) % slot == 0));
        drop(many);
    }
}
