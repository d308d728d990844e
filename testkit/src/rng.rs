//! A tiny xorshift generator: jitter, port picking and the fault mixes of the
//! chaos tests and benches need randomness, not quality, and no `rand`
//! dependency.

use std::sync::atomic::{AtomicU64, Ordering};

static SEED_SEQ: AtomicU64 = AtomicU64::new(0);

/// xorshift64* (Vigna); never zero state.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator seeded from the clock, the pid and a process-wide counter,
    /// so that generators created in the same nanosecond still differ.
    pub fn seeded() -> XorShift {
        let seq = SEED_SEQ.fetch_add(1, Ordering::Relaxed);
        XorShift::new(
            crate::monotonic_now_ns()
                ^ (u64::from(std::process::id()) << 32)
                ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )
    }

    /// A generator whose stream depends only on `seed` (reproducible runs).
    pub fn new(seed: u64) -> XorShift {
        // splitmix64 step, so that similar seeds give unrelated states.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        XorShift(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// The next number of the stream.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_seeds_give_different_streams() {
        let a: Vec<u64> = (0..4)
            .scan(XorShift::new(1), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .scan(XorShift::new(2), |r, _| Some(r.next_u64()))
            .collect();
        assert_ne!(a, b);
        assert!(a.iter().all(|&x| x != 0));
    }

    #[test]
    fn roughly_uniform_over_small_buckets() {
        let mut r = XorShift::new(42);
        let mut buckets = [0u32; 10];
        for _ in 0..10_000 {
            buckets[(r.next_u64() % 10) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (800..1200).contains(&n)),
            "{buckets:?}"
        );
    }

    #[test]
    fn seeded_generators_differ() {
        assert_ne!(XorShift::seeded().next_u64(), XorShift::seeded().next_u64());
    }
}
