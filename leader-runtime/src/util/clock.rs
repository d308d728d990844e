//! The clocks behind the gate's "is the view still valid now?".
//!
//! The view ends at an instant of tokio's clock (the election's clock, which
//! paused-time tests drive). Reading it precisely costs a `CLOCK_MONOTONIC`
//! read, which on a virtual machine costs more than everything else the
//! gate does (BENCHMARKS.md). The kernel's `CLOCK_MONOTONIC_COARSE` is the same clock as of the
//! last timer tick and reads in a few nanoseconds, but it lags: by up to one
//! tick (1–10 ms) normally, longer only if the kernel's timekeeping itself
//! stalls.
//!
//! So a view carries a second deadline, the fast one: the same end on the
//! kernel's clock, minus [`COARSE_LAG`]. While the coarse clock is before it,
//! the view certainly holds (unless the kernel's clock stalled for more than
//! [`COARSE_LAG`] while this thread ran); in the last [`COARSE_LAG`] of a view
//! (after renewals failed) the precise clock decides, to the nanosecond. A
//! view gets no fast deadline when tokio's clock does not follow the kernel's
//! (paused by `tokio::time::pause`), or on systems without a coarse clock.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// How far behind the precise clock the coarse clock may be when the fast
/// deadline is trusted: 25 ticks at 100 Hz, far beyond a tick's lag.
pub(crate) const COARSE_LAG: Duration = Duration::from_millis(250);

/// A deadline this far ahead stands for none (`Duration::MAX` and the like
/// given as a timeout).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The instant `timeout` from now, or one a century ahead when that is past
/// the clock's range (a caller's `Duration::MAX`: wait for good).
pub(crate) fn deadline_in(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or_else(|| now + FOREVER)
}

/// The coarsest coarse clock that is used at all.
const COARSE_RESOLUTION_LIMIT: Duration = Duration::from_millis(10);

/// The fast deadline of a view ending at `valid_until` (tokio's clock): the
/// coarse clock's reading before which the view certainly holds, in
/// nanoseconds; 0 for none.
pub(crate) fn fast_deadline(valid_until: Instant) -> u64 {
    if !coarse_usable() {
        return 0;
    }
    let before = Instant::now();
    let Some(kernel_now) = precise_ns() else {
        return 0;
    };
    let after = Instant::now();
    // A paused tokio clock stands still across a kernel clock read: its
    // instants cannot be put on the kernel's clock.
    if after <= before {
        return 0;
    }
    // `kernel_now` was read before `after`: the kernel's clock at the end of
    // the view is at least this (never later than the true end).
    let remaining = valid_until.saturating_duration_since(after);
    match remaining.checked_sub(COARSE_LAG) {
        Some(ahead) => kernel_now.saturating_add(nanos(ahead)),
        None => 0,
    }
}

/// Whether the coarse clock is before `fast_deadline` (0: never).
#[inline]
pub(crate) fn before_fast_deadline(fast_deadline: u64) -> bool {
    fast_deadline != 0 && coarse_ns() < fast_deadline
}

/// `d` in nanoseconds, saturating.
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// The last millisecond of the year 9999 (UTC), in Unix ms: the latest
/// wall-clock time a value read back from the backend may stand for.
const LATEST_UNIX_MS: u64 = 253_402_300_799_999;

/// A wall-clock time the backend holds as Unix ms (a pause's, a cron run's),
/// or `None` past the year 9999. No clock writes such a value, only a
/// stray write does; and as a `SystemTime` it would break whoever formats
/// it (chrono's `DateTime::from(SystemTime)` panics past the year 262143,
/// and RFC 3339 has no such years).
pub(crate) fn wall_time_from_unix_ms(ms: u64) -> Option<std::time::SystemTime> {
    (ms <= LATEST_UNIX_MS).then(|| std::time::UNIX_EPOCH + Duration::from_millis(ms))
}

/// Whether this system has a coarse clock of the same origin as the precise
/// one, fine enough to be worth it (checked once).
fn coarse_usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        let usable = sys::coarse_resolution().is_some_and(|r| r <= COARSE_RESOLUTION_LIMIT);
        if !usable {
            tracing::debug!("no usable coarse clock: the gate reads the precise clock");
        }
        usable
    })
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod sys {
    use std::time::Duration;

    use rustix::time::{clock_getres, clock_gettime, clock_gettime_dynamic};
    use rustix::time::{ClockId, DynamicClockId, Timespec};

    /// The coarse clock's resolution; `None` when the kernel lacks it (the
    /// fallible read first: rustix's infallible calls would panic).
    pub(super) fn coarse_resolution() -> Option<Duration> {
        clock_gettime_dynamic(DynamicClockId::Known(ClockId::MonotonicCoarse)).ok()?;
        duration(clock_getres(ClockId::MonotonicCoarse))
    }

    /// `CLOCK_MONOTONIC_COARSE` in nanoseconds; `u64::MAX` (a reading after
    /// every deadline) if it is out of range. Read only once
    /// [`coarse_resolution`] found the clock (a view has no fast deadline
    /// otherwise).
    #[inline]
    pub(super) fn coarse_ns() -> u64 {
        duration(clock_gettime(ClockId::MonotonicCoarse)).map_or(u64::MAX, super::nanos)
    }

    /// `CLOCK_MONOTONIC` (what `std::time::Instant` reads) in nanoseconds.
    pub(super) fn precise_ns() -> Option<u64> {
        let now = clock_gettime_dynamic(DynamicClockId::Known(ClockId::Monotonic)).ok()?;
        duration(now).map(super::nanos)
    }

    #[inline]
    fn duration(t: Timespec) -> Option<Duration> {
        let secs = u64::try_from(t.tv_sec).ok()?;
        let nanos = u32::try_from(t.tv_nsec)
            .ok()
            .filter(|n| *n < 1_000_000_000)?;
        Some(Duration::new(secs, nanos))
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod sys {
    use std::time::Duration;

    pub(super) fn coarse_resolution() -> Option<Duration> {
        None
    }

    pub(super) fn coarse_ns() -> u64 {
        u64::MAX
    }

    pub(super) fn precise_ns() -> Option<u64> {
        None
    }
}

use sys::{coarse_ns, precise_ns};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_is_the_precise_one_as_of_the_last_tick() {
        assert!(coarse_usable(), "Linux has CLOCK_MONOTONIC_COARSE");
        for _ in 0..1000 {
            let coarse = coarse_ns();
            let precise = precise_ns().unwrap();
            assert!(coarse <= precise, "coarse {coarse} after precise {precise}");
            // One tick at most, with room for a preempted test thread.
            let lag = Duration::from_nanos(precise - coarse);
            assert!(lag < COARSE_LAG, "coarse clock {lag:?} behind");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_too_far_for_the_clock_is_a_century_ahead() {
        let now = Instant::now();
        assert_eq!(
            deadline_in(Duration::from_secs(3)),
            now + Duration::from_secs(3)
        );
        assert_eq!(deadline_in(Duration::MAX), now + FOREVER);
    }

    #[tokio::test]
    async fn a_fast_deadline_ends_the_lag_before_the_view() {
        let valid_until = Instant::now() + Duration::from_secs(10);
        let fast = fast_deadline(valid_until);
        let view_end = precise_ns().unwrap() + nanos(Duration::from_secs(10));
        let lag = Duration::from_nanos(view_end - fast);
        assert!(lag >= COARSE_LAG, "{lag:?}");
        assert!(lag < COARSE_LAG + Duration::from_millis(100), "{lag:?}");
        assert!(before_fast_deadline(fast));
    }

    #[tokio::test]
    async fn a_view_within_the_lag_of_its_end_has_no_fast_deadline() {
        assert_eq!(fast_deadline(Instant::now() + COARSE_LAG / 2), 0);
        assert_eq!(fast_deadline(Instant::now()), 0);
        assert!(!before_fast_deadline(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_tokio_clock_gets_no_fast_deadline() {
        assert_eq!(fast_deadline(Instant::now() + Duration::from_secs(10)), 0);
    }
}
