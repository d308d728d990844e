//! The count of a group's gated runs in flight, cheap to change on the
//! gate's path and exact for the drain that waits for it.
//!
//! A locked read-modify-write (`fetch_add`) on one shared counter is costly
//! on x86 whether or not another thread touches it, and the gate would do
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
//!   locked `fetch_add` (the old cost, still correct). A thread on slot 0
//!   tries again after another thread gave a slot back ([`FREED`]), so a
//!   burst of threads does not leave long-lived ones on the slow path.
//! - An async body may finish on another thread than the one it started on:
//!   it counts in on the first thread's slot and out on the second's. Slots
//!   wrap, and only their sum means anything. A thread moves from the shared
//!   slot to a freed one only when it counts in, never when it counts out:
//!   a refused run (in and out on one thread, within the gate) then changes
//!   one slot only, which 3. below needs.
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
//! Every read of the count that decides something (a drain, a balance
//! hand-over's check that nothing runs, and the end of a view keeping the
//! leadership for runs in flight) follows a heavy fence issued after
//! `admitting` last went from true to false: see `Runs::stop_admitting` and
//! `Runs::quiesce` in `group/mod.rs`. (`quiesce` may set `admitting` true again
//! when the count is not zero: the argument above holds for each interval
//! in which it is false.)

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
        self.add(own_slot(), 1);
    }

    /// Count a run out. Follow it with a `SeqCst` load of the admitting flag.
    /// A thread on the shared slot stays there: a run refused after the
    /// drain's fence counts in and out on one thread, and must do both on
    /// one slot (see the module docs, 3.).
    #[inline]
    pub(crate) fn leave(&self) {
        self.add(slot_to_leave(), u32::MAX); // -1, wrapping
    }

    #[inline]
    fn add(&self, own: usize, n: u32) {
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

/// How many times an exiting thread gave its slot back (wraps): a thread on
/// the shared slot looks for a free one again when this changed since its
/// last look.
static FREED: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread's slot index. No destructor, so reading it is one load
    /// (a thread-local with a destructor checks its state on every access)
    /// and it stays readable while the thread's thread-locals are destroyed.
    static OWN: Cell<u8> = const { Cell::new(UNTAKEN) };
    /// [`FREED`] when this thread last looked for a free slot.
    static FREED_SEEN: Cell<u32> = const { Cell::new(0) };
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
            // Release after the bit is clear: a thread that sees the new
            // value (Acquire) sees the slot free.
            FREED.fetch_add(1, Release);
        }
    }
}

/// Tests: whether this thread ever counted a run in or out.
#[cfg(test)]
pub(crate) fn counted_on_this_thread() -> bool {
    OWN.get() != UNTAKEN
}

/// This thread's slot index (0: the shared one).
#[inline]
fn own_slot() -> usize {
    match OWN.get() {
        UNTAKEN => take_slot(),
        own if own == SHARED as u8 => shared_or_freed(),
        own => usize::from(own),
    }
}

/// This thread's slot index for a count-out: the shared slot's threads do
/// not look for a freed one (only a count-in may move a thread).
#[inline]
fn slot_to_leave() -> usize {
    match OWN.get() {
        UNTAKEN => take_slot(),
        own => usize::from(own),
    }
}

/// On the shared slot: look for a slot of our own again if one was given
/// back since the last look (only then: scanning on every call would cost
/// the busy pool more than the shared slot does).
#[cold]
fn shared_or_freed() -> usize {
    if asymmetric() && FREED.load(Acquire) != FREED_SEEN.get() {
        take_slot()
    } else {
        SHARED
    }
}

/// Take a free slot, or the shared one: when all are taken, or without
/// `membarrier` (every change is then a read-modify-write anyway).
#[cold]
fn take_slot() -> usize {
    let mut slot = SHARED;
    // Before the scan: a slot given back after it changes `FREED` again.
    FREED_SEEN.set(FREED.load(Acquire));
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
    use std::sync::{mpsc, Barrier};

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

    /// A thread gives its slot back when it exits: of a hundred short-lived
    /// threads in a row, more than [`SLOTS`] get one of their own, which
    /// only slots given back allow (where `membarrier` is available:
    /// otherwise none takes one). Other tests' threads may hold slots
    /// meanwhile, so not every thread need get one.
    #[test]
    fn exited_threads_give_their_slot_back() {
        let _count = InFlight::new();
        if !asymmetric() {
            return;
        }
        let own = (0..100)
            .filter(|_| {
                std::thread::spawn(|| {
                    InFlight::new().enter();
                    usize::from(OWN.get()) != SHARED
                })
                .join()
                .unwrap()
            })
            .count();
        assert!(own > SLOTS, "{own} of 100 threads got a slot");
    }

    /// A thread that found every slot taken takes one once another thread
    /// gave its slot back, instead of staying on the shared slot (and its
    /// locked read-modify-writes) for the rest of its life.
    #[test]
    fn a_thread_on_the_shared_slot_takes_a_slot_given_back() {
        let count = InFlight::new();
        if !asymmetric() {
            return;
        }
        std::thread::scope(|s| {
            let (slot_tx, slot_rx) = mpsc::channel();
            // Each thread counts a run in and out on every word it gets,
            // reports its slot, and exits when its sender is dropped.
            let spawn = || {
                let (word_tx, word_rx) = mpsc::channel::<()>();
                let (slot_tx, count) = (slot_tx.clone(), &count);
                let thread = s.spawn(move || {
                    while word_rx.recv().is_ok() {
                        count.enter();
                        count.leave();
                        slot_tx.send(usize::from(OWN.get())).unwrap();
                    }
                });
                (word_tx, thread)
            };
            // Holders take slots until a thread finds none left (other
            // tests may hold some too).
            let mut holders = Vec::new();
            let stuck = loop {
                assert!(holders.len() <= 2 * SLOTS, "never ran out of slots");
                let (word, thread) = spawn();
                word.send(()).unwrap();
                if slot_rx.recv().unwrap() == SHARED {
                    break word;
                }
                holders.push((word, thread));
            };
            // Holders exit one at a time; the stuck thread soon has a slot.
            let mut got_one = false;
            for (word, thread) in holders {
                drop(word);
                thread.join().unwrap();
                stuck.send(()).unwrap();
                if slot_rx.recv().unwrap() != SHARED {
                    got_one = true;
                    break;
                }
            }
            assert!(
                got_one,
                "still on the shared slot after every holder exited"
            );
        });
        assert_eq!(count.count(), 0);
    }

    /// A thread on the shared slot counts a run out there even when a slot
    /// was given back since it counted in: a refused run's in and out on
    /// two slots could read as -1 in a drain's sum (the count-in not yet
    /// seen on one slot, the count-out seen on the other), hiding an
    /// admitted run still in flight.
    #[test]
    fn a_count_out_on_the_shared_slot_stays_there() {
        let count = InFlight::new();
        if !asymmetric() {
            return;
        }
        std::thread::scope(|s| {
            // Holders take slots until a thread finds none left (other
            // tests may hold some too); each exits when its sender drops.
            let mut holders = Vec::new();
            let (stuck_in, stuck_rx) = mpsc::channel::<()>();
            let (stuck_tx, stuck_done) = mpsc::channel();
            loop {
                assert!(holders.len() <= 2 * SLOTS, "never ran out of slots");
                let (word, wait) = mpsc::channel::<()>();
                let (slot_tx, slot_rx) = mpsc::channel();
                let holder = s.spawn(move || {
                    InFlight::new().enter();
                    slot_tx.send(usize::from(OWN.get())).unwrap();
                    let _ = wait.recv();
                });
                if slot_rx.recv().unwrap() == SHARED {
                    drop(word);
                    holder.join().unwrap();
                    break;
                }
                holders.push((word, holder));
            }
            let count = &count;
            let stuck = s.spawn(move || {
                count.enter();
                let entered_on = usize::from(OWN.get());
                stuck_tx.send(entered_on).unwrap();
                stuck_rx.recv().unwrap();
                count.leave();
                stuck_tx.send(usize::from(OWN.get())).unwrap();
            });
            if stuck_done.recv().unwrap() != SHARED {
                // Another test gave a slot back meanwhile: no case here.
                stuck_in.send(()).unwrap();
                stuck.join().unwrap();
                return;
            }
            // A holder exits: a slot is free when the stuck thread counts out.
            let (word, holder) = holders.pop().unwrap();
            drop(word);
            holder.join().unwrap();
            stuck_in.send(()).unwrap();
            assert_eq!(
                stuck_done.recv().unwrap(),
                SHARED,
                "moved when counting out"
            );
            stuck.join().unwrap();
            assert_eq!(
                count.slots[SHARED].load(SeqCst),
                0,
                "in and out on one slot"
            );
        });
        assert_eq!(count.count(), 0);
    }

    /// Store buffering, the race the heavy fence exists for: a gate stores
    /// its count-in then loads `admitting`; a drain stores `admitting =
    /// false` then reads the count. Without a fence on either side, x86
    /// lets both loads miss the other's store (the gate runs, the drain reads
    /// zero). With the gate's plain store and the drain's `heavy_fence`,
    /// that outcome never happens, round after round on two threads.
    ///
    /// Seen failing on a 2-core AMD EPYC guest: with the `heavy_fence` call
    /// removed, about 1 round in 200 (so the default 20,000 rounds always
    /// catch it); with a `SeqCst` fence alone in its place (no
    /// `membarrier`: the gate's store can still wait in its store buffer),
    /// 1,745 misses in 3,000,000 rounds of a release build
    /// (`LEADER_LITMUS_ROUNDS=3000000 cargo test --release -p leader-runtime
    /// --lib a_drain_and_a_gate`), too rare for the default run.
    #[test]
    fn a_drain_and_a_gate_never_both_miss_each_other() {
        let rounds: u32 = std::env::var("LEADER_LITMUS_ROUNDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(20_000);
        let count = InFlight::new();
        let admitting = AtomicBool::new(true);
        // Spin hand-offs (a futex wake-up would start the two sides
        // microseconds apart, too far for the race to show): the round the
        // drain started, the last one it read the count in, and the last
        // one the gate finished.
        let (go, read, done) = (AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0));
        let gate_ran = AtomicBool::new(false);
        let mut missed = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 1..=rounds {
                    while go.load(Acquire) != round {
                        std::hint::spin_loop();
                    }
                    count.enter();
                    gate_ran.store(admitting.load(SeqCst), Relaxed);
                    // In flight until the drain has read the count.
                    while read.load(Acquire) != round {
                        std::hint::spin_loop();
                    }
                    count.leave();
                    done.store(round, Release);
                }
            });
            for round in 1..=rounds {
                admitting.store(true, SeqCst);
                go.store(round, Release);
                admitting.store(false, SeqCst);
                heavy_fence();
                let seen = count.count();
                read.store(round, Release);
                while done.load(Acquire) != round {
                    std::hint::spin_loop();
                }
                // The gate ran its body (saw `admitting` true) in flight
                // while the drain read no run: the drain would have
                // released under it.
                if gate_ran.load(Relaxed) && seen == 0 {
                    missed += 1;
                }
            }
        });
        assert_eq!(missed, 0, "the drain missed an admitted run {missed} times");
    }

    /// CI asserts the fast mode is the one in use where it should be
    /// (`LEADER_EXPECT_MEMBARRIER=1` in `.ci/run` on Linux): a kernel or
    /// sandbox without `membarrier` would otherwise fall back silently to
    /// the locked counts and the gate benchmark would measure those.
    #[test]
    fn membarrier_is_in_use_where_expected() {
        let _count = InFlight::new();
        if std::env::var_os("LEADER_EXPECT_MEMBARRIER").is_some() {
            assert!(asymmetric(), "membarrier(PRIVATE_EXPEDITED) is not in use");
        }
    }
}
