//! The count of a group's gated runs in flight, cheap to change on the
//! gate's path and exact for the drain that waits for it.
//!
//! A locked read-modify-write (`fetch_add`) on one shared counter costs
//! 5–10 ns on x86 whether or not another thread touches it, and the gate did
//! two per call (in, and out). Here each thread owns a *slot* of every
//! group's count and changes it with a plain load and store: no `lock`
//! prefix, no fence on the gate's side. The side that reads the count (the
//! drain, rare) pays instead, with one `membarrier` system call: an
//! *asymmetric fence*, the scheme of liburcu and folly's
//! `asymmetricHeavyBarrier`.
//!
//! - A thread's slot index is taken from a process-wide bitmask on its first
//!   gated call and given back when the thread exits (a thread-local's
//!   destructor), so a pool that starts and stops threads reuses slots. The
//!   first [`SLOTS`] threads gating at the same time own one; others, and a
//!   thread whose thread-locals are being destroyed, share slot 0 with a
//!   locked `fetch_add` (the old cost, still correct).
//! - An async body may finish on another thread than the one it started on:
//!   it counts in on the first thread's slot and out on the second's. Slots
//!   wrap, and only their sum means anything.
//! - Without `membarrier` (not Linux, or a kernel or sandbox without
//!   `MEMBARRIER_CMD_PRIVATE_EXPEDITED`), no thread takes a slot: every
//!   change is a `SeqCst` `fetch_add` on the shared slot and the heavy side
//!   a `SeqCst` fence, the old cost and the plain Dekker argument.
//!
//! # Why a drain never misses an admitted run
//!
//! The gate does: count in (store to its slot), a compiler fence, load
//! `admitting`; it runs the body only if that load saw `true`. The drain
//! does: store `admitting = false`, [`heavy_fence`] (a `SeqCst` fence and
//! `membarrier`), then sums the slots, and waits while the sum is not zero.
//!
//! 1. `membarrier(PRIVATE_EXPEDITED)` returns only after every thread of the
//!    process that was running has executed a full memory barrier (an IPI),
//!    and a thread not running has passed one in the context switch. So each
//!    gating thread's instructions split at that barrier into those before
//!    (their stores, including ones still in the store buffer, are visible
//!    to the drain's later loads) and those after (their loads see the
//!    drain's `admitting = false`, stored before the call). The compiler
//!    fence keeps the gate's store before its load in the instruction stream.
//! 2. So a run whose load of `admitting` saw `true` did it before its
//!    thread's barrier, and its count-in store, earlier in program order,
//!    is visible to the drain's sum. A run that loads after the barrier sees
//!    `false` and counts itself out at once, on the same slot, without
//!    running.
//! 3. Each slot has one writer at a time (its owner; ownership passes with
//!    `Release`/`Acquire` on the bitmask, slot 0 uses atomic read-modify-
//!    writes), so a read of it returns a prefix of its changes: never a
//!    count-out without the count-in before it on that slot. Summed, the
//!    admitted runs' count-ins are all there (2.), a count-out is there only
//!    if it happened, and a refused run contributes 0 or +1: the sum is at
//!    least the number of admitted runs that have not finished. Zero means
//!    every admitted run finished.
//! 4. A run finishing while the drain waits: it counts out, compiler fence,
//!    loads `admitting`; seeing `false` it wakes the drain (`Notify`). By the
//!    same split as in 1., either it loads after its barrier and sees
//!    `false` (and wakes a drain that registered before reading the sum:
//!    `Notify` orders the two), or its count-out is visible to the drain's
//!    first sum after the fence.
//!
//! Every read of the count that decides something (a drain, and the end of
//! a view keeping the leadership for runs in flight) follows a heavy fence
//! issued after `admitting` last went from true to false: see
//! `Runs::stop_admitting` in `group.rs`.

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU32, Ordering::*};

/// How many threads can own a slot at the same time (31, plus the shared
/// slot 0: 128 bytes a group).
pub(crate) const SLOTS: usize = 31;
// An index masked with `SLOTS` is in bounds.
const _: () = assert!((SLOTS + 1).is_power_of_two());

/// The in-flight count of one group, one slot per owning thread.
pub(crate) struct InFlight {
    /// Slot 0: threads without a slot of their own; `n`: the thread holding
    /// bit `n - 1` of [`TAKEN`]. Each wraps; their sum is the count.
    slots: [AtomicU32; SLOTS + 1],
    /// A heavy fence for this count could not be issued: no sum of the slots
    /// is known to be exact any more, so [`count`](Self::count) never reads
    /// zero again (drains wait out their deadline and report failure).
    unfenced: AtomicBool,
}

impl InFlight {
    pub(crate) fn new() -> Self {
        init();
        Self {
            slots: std::array::from_fn(|_| AtomicU32::new(0)),
            unfenced: AtomicBool::new(false),
        }
    }

    /// The drain's side of the fence for this count ([`heavy_fence`]); if
    /// it cannot be issued, the count fails closed from then on.
    pub(crate) fn fence(&self) {
        if !heavy_fence() {
            self.unfenced.store(true, SeqCst);
        }
    }

    /// Tests: act as if a heavy fence had failed.
    #[cfg(test)]
    pub(crate) fn fail_fence(&self) {
        self.unfenced.store(true, SeqCst);
    }

    /// Count a run in. Follow it with a `SeqCst` load of the admitting flag.
    #[inline]
    pub(crate) fn enter(&self) {
        self.add(1);
    }

    /// Count a run out. Follow it with a `SeqCst` load of the admitting flag.
    #[inline]
    pub(crate) fn leave(&self) {
        self.add(u32::MAX); // -1, wrapping
    }

    #[inline]
    fn add(&self, n: u32) {
        let own = own_slot();
        // `own` is at most `SLOTS`: the mask only spares a bounds check.
        let slot = &self.slots[own & SLOTS];
        if own != SHARED {
            // Only threads that took a slot of their own while `membarrier`
            // was available get here (see `take_slot`).
            // The only writer of this slot: no `lock` prefix needed. A
            // `Release` store (a plain one on x86): a drain that reads it
            // also sees what the body did before it counted out.
            slot.store(slot.load(Relaxed).wrapping_add(n), Release);
            // Keep the store before the caller's load of the admitting
            // flag; the heavy side's `membarrier` does the rest.
            compiler_fence(SeqCst);
        } else {
            slot.fetch_add(n, SeqCst);
        }
    }

    /// How many runs are in flight. Exact only after a [`heavy_fence`]
    /// issued once the admitting flag was false (see the module docs);
    /// until the runs finish, never below the number of admitted ones.
    pub(crate) fn count(&self) -> usize {
        let sum = self
            .slots
            .iter()
            .fold(0u32, |sum, slot| sum.wrapping_add(slot.load(SeqCst)));
        if self.unfenced.load(SeqCst) {
            // Safety before liveness: a run may be in flight that the sum
            // cannot show.
            return (sum as usize).max(1);
        }
        sum as usize
    }
}

/// Make every thread's earlier stores visible to this thread's later loads,
/// and this thread's earlier stores to every thread's later loads: the
/// drain's side of the fence. A system call that interrupts each CPU running
/// a thread of this process: tens of microseconds, more on a VM whose vCPU
/// the host descheduled (BENCHMARKS.md); once per hand-over or loss.
pub(crate) fn heavy_fence() -> bool {
    fence(SeqCst);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if asymmetric() {
        use rustix::thread::{membarrier, MembarrierCommand};
        if let Err(e) = membarrier(MembarrierCommand::PrivateExpedited) {
            // Registered at start, so only a kernel short of memory or a
            // seccomp filter makes it fail; the global command (no
            // registration, slower) gives the same guarantee.
            tracing::error!(error = %e, "membarrier(PRIVATE_EXPEDITED) failed; using the global command");
            if let Err(e) = membarrier(MembarrierCommand::Global) {
                tracing::error!(error = %e, "membarrier(GLOBAL) failed too: the count of gated runs in flight can no longer be trusted; hand-overs wait until the view ends and let the lease expire instead of releasing it");
                fence(SeqCst);
                return false;
            }
        }
    }
    fence(SeqCst);
    true
}

/// Whether the gate's side may use plain stores (set once, before the first
/// group exists, so every group sees one value).
static ASYMMETRIC: AtomicBool = AtomicBool::new(false);

#[inline]
fn asymmetric() -> bool {
    ASYMMETRIC.load(Relaxed)
}

/// Register for `membarrier(PRIVATE_EXPEDITED)` once per process. Called
/// before each group is built; the group's publication orders it before
/// any use of the group.
fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use rustix::thread::{membarrier, membarrier_query, MembarrierCommand};
            let supported = membarrier_query();
            let ok = supported.contains_command(MembarrierCommand::PrivateExpedited)
                && supported.contains_command(MembarrierCommand::RegisterPrivateExpedited)
                && membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok();
            if !ok {
                tracing::debug!("membarrier(PRIVATE_EXPEDITED) unavailable: gated runs are counted with atomic read-modify-writes");
            }
            ASYMMETRIC.store(ok, Relaxed);
        }
    });
}

/// Slot 0, shared with atomic read-modify-writes.
const SHARED: usize = 0;
/// Not taken yet.
const UNTAKEN: u8 = u8::MAX;

/// Bit `n` set: slot `n + 1` is owned by a live thread.
static TAKEN: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread's slot index. No destructor, so reading it is one load
    /// (a thread-local with a destructor checks its state on every access)
    /// and it stays readable while the thread's thread-locals are destroyed.
    static OWN: Cell<u8> = const { Cell::new(UNTAKEN) };
    /// Gives the slot back when the thread exits: set when one is taken.
    static GIVE_BACK: GiveBack = const { GiveBack(Cell::new(false)) };
}

/// Frees this thread's slot on exit; later changes on this thread (other
/// thread-locals' destructors) use the shared slot.
struct GiveBack(Cell<bool>);

impl Drop for GiveBack {
    fn drop(&mut self) {
        if self.0.get() {
            let own = OWN.replace(SHARED as u8);
            TAKEN.fetch_and(!(1 << (own - 1)), Release);
        }
    }
}

/// This thread's slot index (0: the shared one).
#[inline]
fn own_slot() -> usize {
    match OWN.get() {
        UNTAKEN => take_slot(),
        own => usize::from(own),
    }
}

/// Take a free slot, or the shared one: when all are taken, or without
/// `membarrier` (every change is then a read-modify-write anyway).
#[cold]
fn take_slot() -> usize {
    let mut slot = SHARED;
    if asymmetric() {
        let mut taken = TAKEN.load(Relaxed);
        while (!taken).trailing_zeros() < SLOTS as u32 {
            let free = (!taken).trailing_zeros();
            match TAKEN.compare_exchange_weak(taken, taken | (1 << free), Acquire, Relaxed) {
                Ok(_) => {
                    slot = free as usize + 1;
                    break;
                }
                Err(now) => taken = now,
            }
        }
    }
    if slot != SHARED && GIVE_BACK.try_with(|g| g.0.set(true)).is_err() {
        // The thread is exiting: nothing would give the slot back.
        TAKEN.fetch_and(!(1 << (slot - 1)), Release);
        slot = SHARED;
    }
    OWN.set(slot as u8);
    slot
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use super::*;

    /// Runs counted in on one thread and out on others (async bodies that
    /// moved) add up, with more threads at once than there are slots.
    #[test]
    fn runs_counted_in_and_out_on_different_threads_add_up() {
        let count = InFlight::new();
        let threads = SLOTS + 9;
        std::thread::scope(|s| {
            s.spawn(|| (0..threads * 100).for_each(|_| count.enter()));
        });
        assert_eq!(count.count(), threads * 100);
        let all_alive = Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    all_alive.wait();
                    (0..100).for_each(|_| count.leave());
                    all_alive.wait();
                });
            }
        });
        assert_eq!(count.count(), 0);
    }

    /// A thread gives its slot back when it exits: a hundred short-lived
    /// threads in a row each get one of their own (where `membarrier` is
    /// available: otherwise none takes one).
    #[test]
    fn exited_threads_give_their_slot_back() {
        let _count = InFlight::new();
        if !asymmetric() {
            return;
        }
        for _ in 0..100 {
            let slot = std::thread::spawn(|| {
                InFlight::new().enter();
                OWN.get()
            })
            .join()
            .unwrap();
            assert_ne!(usize::from(slot), SHARED);
        }
    }
}
