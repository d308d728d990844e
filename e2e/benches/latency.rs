//! Latency harness: how long a group is without a leader after the leader
//! crashes (kill -9), shuts down (SIGTERM → `shutdown`), or steps down
//! (`step_down`). Starts a `redis-server` on a free port and N instance
//! processes (this binary, re-run as `instance`), then runs many rounds of
//! each and prints min / median / p99 / max.
//!
//! ```text
//! cargo bench -p leader-e2e --bench latency -- [--instances 3] [--rounds 50] [--ttl-ms 2000]
//!     [--renew-ms 500] [--modes crash,sigterm,step_down]
//! ```
//!
//! Each round starts at a random point of the leader's renew cycle. A round's
//! latency runs from the harness reading `CLOCK_MONOTONIC` just before it
//! kills, signals or commands the leader, to the `elected` line (same clock)
//! of the instance that leads next. For crashes it also prints the time from
//! the lease's expiry on the server (the dead leader's last renewal + ttl) to
//! the next election. Targets: graceful ≤ 20 ms p99; crash ≤ ttl + 50 ms p99.

mod common;

use std::time::Duration;

use common::{
    command, flag, flag_or, machine, ns_of, run_if_instance, spawn_instance, summary, InstanceArgs,
    SUMMARY_HEADER,
};
use leader_testkit::{monotonic_now_ns, ChildProcess, RedisServer, XorShift};

const GROUP: &str = "latency";

struct Instance {
    child: ChildProcess,
}

impl Instance {
    async fn start(args: &InstanceArgs) -> Self {
        let child = spawn_instance(args);
        child
            .stdout()
            .wait_for(|l| l.starts_with("all_ready"), Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("instance did not start: {e}\n{}", child.transcript()));
        Self { child }
    }

    /// Leading now, going by its last transition line.
    fn leads(&self) -> bool {
        self.child
            .stdout()
            .snapshot()
            .iter()
            .rev()
            .find(|l| l.starts_with("elected ") || l.starts_with("lost "))
            .is_some_and(|l| l.starts_with("elected "))
    }

    fn last_renewal_ns(&self) -> Option<u64> {
        self.child
            .stdout()
            .snapshot()
            .iter()
            .rev()
            .find(|l| l.starts_with("renewed ") || l.starts_with("elected "))
            .map(|l| ns_of(l))
    }
}

/// Where in the renew cycle to act: a number below `n`.
fn below(rng: &mut XorShift, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

fn main() {
    run_if_instance();
    let args: Vec<String> = std::env::args().collect();
    let instances: usize = flag_or(&args, "--instances", 3);
    let rounds: usize = flag_or(&args, "--rounds", 50);
    let ttl = Duration::from_millis(flag_or(&args, "--ttl-ms", 2000));
    let renew = Duration::from_millis(flag_or(&args, "--renew-ms", 500));
    let modes = flag(&args, "--modes").unwrap_or_else(|| "crash,sigterm,step_down".to_owned());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    tokio.block_on(async {
        let server = RedisServer::start().await.expect("redis-server");
        println!("# latency harness");
        println!("machine: {}", machine());
        println!(
            "instances {instances}, rounds {rounds} per mode, ttl {ttl:?}, renew_interval {renew:?}, redis {}",
            server.addr()
        );
        let mut next_id = 0;
        let make = |next_id: &mut usize| {
            *next_id += 1;
            InstanceArgs {
                redis: server.url(),
                id: format!("i{next_id}"),
                groups: vec![GROUP.to_owned()],
                ttl,
                renew,
                print_renewals: true,
            }
        };
        let mut fleet = Vec::new();
        for _ in 0..instances {
            fleet.push(Instance::start(&make(&mut next_id)).await);
        }
        let mut rng = XorShift::seeded();
        let mut rows = Vec::new();
        for mode in modes.split(',') {
            let mut latency = Vec::new();
            let mut after_expiry = Vec::new();
            for round in 0..rounds {
                // Wait for a leader, then act at a random point of its renew cycle.
                let leader = wait_for_leader(&fleet, ttl * 4).await;
                let phase = below(&mut rng, renew.as_millis() as u64);
                tokio::time::sleep(Duration::from_millis(50 + phase)).await;
                let marks: Vec<usize> = fleet.iter().map(|i| i.child.stdout().len()).collect();
                let t0 = monotonic_now_ns();
                match mode {
                    "crash" => fleet[leader].child.kill9().expect("kill -9"),
                    "sigterm" => fleet[leader].child.terminate().expect("SIGTERM"),
                    "step_down" => command(&mut fleet[leader].child, &format!("step_down {GROUP}")).await,
                    other => panic!("unknown mode {other}"),
                }
                let (next, t1) = wait_for_election(&fleet, &marks, leader, ttl * 3)
                    .await
                    .unwrap_or_else(|| panic!("{mode} round {round}: nobody took over"));
                latency.push((t1 - t0) as f64 / 1e6);
                if mode == "crash" {
                    if let Some(renewed) = fleet[leader].last_renewal_ns() {
                        let expiry = renewed + ttl.as_nanos() as u64;
                        after_expiry.push((t1 as f64 - expiry as f64) / 1e6);
                    }
                }
                let _ = next;
                if mode != "step_down" {
                    let mut gone = fleet.remove(leader);
                    let _ = gone.child.wait_timeout(Duration::from_secs(10)).await;
                    fleet.push(Instance::start(&make(&mut next_id)).await);
                }
            }
            let name = match mode {
                "crash" => format!("crash (kill -9) → next leader; ttl {} ms", ttl.as_millis()),
                "sigterm" => "graceful: SIGTERM → shutdown → next leader".to_owned(),
                _ => "graceful: step_down → next leader".to_owned(),
            };
            rows.push(summary(&name, &mut latency));
            if !after_expiry.is_empty() {
                rows.push(summary(
                    "crash: lease expiry on the server → next leader",
                    &mut after_expiry,
                ));
            }
        }
        println!("{SUMMARY_HEADER}");
        for row in rows {
            println!("{row}");
        }
        for mut instance in fleet {
            command(&mut instance.child, "exit").await;
            let _ = instance.child.wait_timeout(Duration::from_secs(10)).await;
        }
    });
}

async fn wait_for_leader(fleet: &[Instance], limit: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(i) = fleet.iter().position(Instance::leads) {
            return i;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The first `elected` line after `marks` from an instance other than `old`.
async fn wait_for_election(
    fleet: &[Instance],
    marks: &[usize],
    old: usize,
    limit: Duration,
) -> Option<(usize, u64)> {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        for (i, instance) in fleet.iter().enumerate() {
            if i == old {
                continue;
            }
            let lines = instance.child.stdout().snapshot();
            if let Some(line) = lines[marks[i].min(lines.len())..]
                .iter()
                .find(|l| l.starts_with("elected "))
            {
                return Some((i, ns_of(line)));
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}
