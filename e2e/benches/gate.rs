//! The cost of the `#[leader_only]` gate, next to the same function without
//! the attribute, in one run: on an established leader, on a follower, through
//! the global runtime and through `Runtime::scope`; and `is_leader`.
//!
//! ```text
//! cargo bench -p leader-e2e --bench gate                            # wall time
//! BENCH_CLOCK=thread-cpu cargo bench -p leader-e2e --bench gate     # CPU time of the bench thread
//! ```
//!
//! The gate never touches the backend, so an in-memory backend with a long
//! ttl keeps one leadership for the whole run. `clock/*` measures the reads of
//! the monotonic clock (precise, and the kernel's coarse one the gate reads
//! while the view's end is far), and an atomic add-and-subtract pair (the
//! admission count), for scale. This package does
//! not enable tokio's `test-util` (which slows `Instant::now`). See
//! BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput};
use leader_runtime::{leader_only, Config, MemoryBackend, Runtime};
use nix::time::{clock_gettime, ClockId};

mod common;

const TTL: Duration = Duration::from_secs(3600);
const RENEW: Duration = Duration::from_secs(600);

/// The body every variant runs: a little arithmetic the optimiser cannot drop.
#[inline(always)]
fn work(x: u64) -> u64 {
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17)
}

#[inline(never)]
async fn plain(x: u64) -> u64 {
    work(x)
}

#[inline(never)]
fn plain_sync(x: u64) -> u64 {
    work(x)
}

#[inline(never)]
#[leader_only(group = "bench-lead")]
async fn gated_leader(x: u64) -> u64 {
    work(x)
}

#[inline(never)]
#[leader_only(group = "bench-follow")]
async fn gated_follower(x: u64) -> u64 {
    work(x)
}

#[inline(never)]
#[leader_only(group = "bench-lead")]
fn gated_leader_sync(x: u64) -> u64 {
    work(x)
}

#[inline(never)]
#[leader_only(group = "bench-follow")]
fn gated_follower_sync(x: u64) -> u64 {
    work(x)
}

#[inline(never)]
#[leader_only(group = "bench-lead")]
async fn scoped_leader(x: u64) -> u64 {
    work(x)
}

#[inline(never)]
#[leader_only(group = "bench-follow")]
async fn scoped_follower(x: u64) -> u64 {
    work(x)
}

fn config(mem: &MemoryBackend, id: &str) -> Config {
    Config::builder()
        .memory(mem.clone())
        .ttl(TTL)
        .renew_interval(RENEW)
        .instance_id(id)
        .build()
        .expect("valid config")
}

struct Setup {
    tokio: tokio::runtime::Runtime,
    /// Hold `bench-follow` on the two backends, so the benched instances follow it.
    _holders: [Runtime; 2],
    /// An explicit runtime, for the `Runtime::scope` variants.
    scoped: Runtime,
}

/// The global runtime leads `bench-lead` and follows `bench-follow`; an
/// explicit runtime on a second backend does the same for the scoped variants.
fn setup() -> Setup {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (holders, scoped) = tokio.block_on(async {
        let (mem, mem_scoped) = (MemoryBackend::new(), MemoryBackend::new());
        let holders = [
            Runtime::new(config(&mem, "holder")).expect("runtime"),
            Runtime::new(config(&mem_scoped, "holder")).expect("runtime"),
        ];
        for holder in &holders {
            let led = holder.run_if_leader("bench-follow", || async {}).await;
            assert!(led.is_some());
        }
        leader_runtime::init(config(&mem, "global")).expect("init");
        // First calls register the groups and wait for their first rounds.
        assert_eq!(gated_leader(1).await, Some(work(1)));
        assert_eq!(gated_follower(1).await, None);
        assert_eq!(gated_leader_sync(1), Some(work(1)));
        assert_eq!(gated_follower_sync(1), None);
        // No `scope` yet: until a process first uses one, the gate does not
        // look for a scoped runtime (the production path). The scoped
        // variants run last.
        let scoped = Runtime::new(config(&mem_scoped, "scoped")).expect("runtime");
        assert!(scoped
            .run_if_leader("bench-lead", || async {})
            .await
            .is_some());
        assert!(scoped
            .run_if_leader("bench-follow", || async {})
            .await
            .is_none());
        (holders, scoped)
    });
    Setup {
        tokio,
        _holders: holders,
        scoped,
    }
}

fn gate<M: Measurement + 'static>(c: &mut Criterion<M>) {
    let s = setup();

    let mut g = c.benchmark_group("clock");
    g.bench_function("std_instant_now", |b| b.iter(std::time::Instant::now));
    g.bench_function("tokio_instant_now", |b| b.iter(tokio::time::Instant::now));
    // What the gate reads while the view's end is more than 250 ms away.
    g.bench_function("coarse_monotonic", |b| {
        b.iter(|| rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse))
    });
    // For scale: the admission count in and out, as the gate does it.
    let counter = std::sync::atomic::AtomicUsize::new(0);
    g.bench_function("atomic_add_sub_seqcst", |b| {
        b.iter(|| {
            use std::sync::atomic::Ordering::SeqCst;
            black_box(&counter).fetch_add(1, SeqCst);
            black_box(&counter).fetch_sub(1, SeqCst)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("gate_async");
    g.bench_function("plain", |b| {
        b.to_async(&s.tokio).iter(|| plain(black_box(7)))
    });
    g.bench_function("leader", |b| {
        b.to_async(&s.tokio).iter(|| gated_leader(black_box(7)))
    });
    g.bench_function("follower", |b| {
        b.to_async(&s.tokio).iter(|| gated_follower(black_box(7)))
    });
    g.finish();

    let mut g = c.benchmark_group("gate_sync");
    g.bench_function("plain", |b| b.iter(|| plain_sync(black_box(7))));
    g.bench_function("leader", |b| b.iter(|| gated_leader_sync(black_box(7))));
    g.bench_function("follower", |b| b.iter(|| gated_follower_sync(black_box(7))));
    g.finish();

    let mut g = c.benchmark_group("is_leader");
    g.bench_function("global_leader", |b| {
        b.iter(|| leader_runtime::is_leader(black_box("bench-lead")))
    });
    g.bench_function("global_follower", |b| {
        b.iter(|| leader_runtime::is_leader(black_box("bench-follow")))
    });
    g.bench_function("runtime_leader", |b| {
        b.iter(|| s.scoped.is_leader(black_box("bench-lead")))
    });
    g.finish();

    // Inside `Runtime::scope` (how one process plays several instances); the
    // baseline runs in the same scope.
    let mut g = c.benchmark_group("gate_scoped");
    let rt = &s.scoped;
    g.bench_function("plain", |b| {
        b.to_async(&s.tokio).iter(|| rt.scope(plain(black_box(7))))
    });
    g.bench_function("leader", |b| {
        b.to_async(&s.tokio)
            .iter(|| rt.scope(scoped_leader(black_box(7))))
    });
    g.bench_function("follower", |b| {
        b.to_async(&s.tokio)
            .iter(|| rt.scope(scoped_follower(black_box(7))))
    });
    // The free function inside the scope: it looks the scoped runtime up
    // (compare with `plain` above, the scope alone).
    g.bench_function("is_leader", |b| {
        b.to_async(&s.tokio)
            .iter(|| rt.scope(async { leader_runtime::is_leader(black_box("bench-lead")) }))
    });
    g.finish();
}

/// CPU time of the benchmarking thread (`CLOCK_THREAD_CPUTIME_ID`): on a
/// machine shared with other work, time the thread spent preempted is not
/// counted. Every async variant runs on this thread (`block_on`).
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanos
    }
}

fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).expect("thread CPU clock");
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

struct Nanos;

impl ValueFormatter for Nanos {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = match typical {
            t if t < 1e3 => (1.0, "ns"),
            t if t < 1e6 => (1e-3, "µs"),
            t if t < 1e9 => (1e-6, "ms"),
            _ => (1e-9, "s"),
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(&self, _: f64, _: &Throughput, _: &mut [f64]) -> &'static str {
        "ns"
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// `cargo bench -p leader-e2e --bench gate` measures wall time, as criterion does by
/// default; with `BENCH_CLOCK=thread-cpu` it measures the benchmarking
/// thread's CPU time instead (for a machine busy with other work).
fn main() {
    // For the record (BENCHMARKS.md wants the CPU model of every figure).
    eprintln!("machine: {}", common::machine());
    let cpu = std::env::var("BENCH_CLOCK").is_ok_and(|v| v == "thread-cpu");
    if cpu {
        let mut c = criterion()
            .with_measurement(ThreadCpu)
            .configure_from_args();
        gate(&mut c);
        c.final_summary();
    } else {
        let mut c = criterion().configure_from_args();
        gate(&mut c);
        c.final_summary();
    }
}

fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}
