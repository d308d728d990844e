//! Explore one configuration from the command line, e.g.
//! `cargo run -p leader-model --release --example explore -- v2fixed 2 2 5 3 2`
//! (protocol, clients, ttl, max_time, max_sends, max_faults). Environment: `DFS=1`, `FIFO=1`,
//! `WITHOUT=<fix>`, `FAULTS=<list>`, `WRITES=n`, `CLAIMS=n`, `MARKER=1` (see the README).

use std::time::Instant;

use leader_model::{
    LeaseModel, Protocol, NO_OVERLAP, NO_STALE_WRITE, TICK_ONCE, TOKENS_GROW, TOKEN_CURRENT,
};
use stateright::{Checker, HasDiscoveries, Model};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: u8| args.get(i).map_or(d, |a| a.parse().expect("a number"));
    let protocol = match args.first().map(String::as_str) {
        Some("v1") => Protocol::V1,
        Some("v2") => Protocol::V2_AS_WRITTEN,
        _ => Protocol::V2_FIXED,
    };
    let dfs = std::env::var_os("DFS").is_some();
    let mut model = LeaseModel::ci(protocol);
    model.clients = arg(1, model.clients);
    model.ttl = arg(2, model.ttl);
    model.max_time = arg(3, model.max_time);
    model.max_sends = arg(4, model.max_sends);
    model.max_faults = arg(5, model.max_faults);
    model.fifo = std::env::var_os("FIFO").is_some();
    if let (Protocol::V2(f), Ok(off)) = (&mut model.protocol, std::env::var("WITHOUT")) {
        *f = leader_model::Fixes::ALL;
        match off.as_str() {
            "reclaim" => f.reclaim_waits_for_floor = false,
            "release" => f.release_keeps_floor = false,
            "renew" => f.renew_needs_vouched_record = false,
            "renewtoken" => f.renew_names_token = false,
            "fence" => f.fence_needs_vouched_record = false,
            _ => f.release_names_token = false,
        }
    }
    if let Ok(faults) = std::env::var("FAULTS") {
        let f = &mut model.faults;
        f.lease_loss = faults.contains("lease");
        f.data_loss = faults.contains("all");
        f.restore = faults.contains("restore");
        f.restore_same_run = faults.contains("samerun");
        f.crash = faults.contains("crash");
        f.evict_any = faults.contains("evict");
        f.flush = faults.contains("flush");
        f.replid_shift = faults.contains("replid");
        f.reset_stat = faults.contains("resetstat");
    }
    let count = |name: &str| std::env::var(name).map_or(0, |v| v.parse().expect("a number"));
    model.max_writes = count("WRITES");
    model.max_claims = count("CLAIMS");
    if let (Protocol::V2(f), true) = (&mut model.protocol, std::env::var_os("MARKER").is_some()) {
        f.server_marker = true;
        f.marker_lists_groups = std::env::var("MARKER").is_ok_and(|v| v == "lists");
    }
    println!("{model:?}");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let start = Instant::now();
    let builder = model
        .checker()
        .threads(threads)
        .finish_when(HasDiscoveries::AnyFailures);
    let checker: Box<dyn Checker<LeaseModel>> = if dfs {
        Box::new(
            builder
                .symmetry_fn(LeaseModel::representative)
                .spawn_dfs()
                .join(),
        )
    } else {
        Box::new(builder.spawn_bfs().join())
    };
    println!(
        "{} states ({} unique), max depth {}, {:.2?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        start.elapsed()
    );
    for name in [
        NO_OVERLAP,
        TOKENS_GROW,
        TOKEN_CURRENT,
        NO_STALE_WRITE,
        TICK_ONCE,
    ] {
        match checker.discovery(name) {
            Some(path) => println!(
                "`{name}` VIOLATED:\n{}",
                checker.model().format_trace(&path)
            ),
            None => println!("`{name}` holds"),
        }
    }
}
