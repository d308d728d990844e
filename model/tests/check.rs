//! Model checks. The bounded ones run in CI (`cargo test -p leader-model --release`);
//! `LEADER_MODEL_FULL=1` adds the larger ones. `--nocapture` prints the figures and traces.

use std::time::Instant;

use leader_model::{
    Faults, Fixes, LeaseModel, Protocol, NO_OVERLAP, NO_STALE_WRITE, SOME_PROMPT_START, SOME_TICK,
    SOME_VIEW, SOME_WAITED_VIEW, SOME_WRITE, TICK_ONCE, TOKENS_GROW, TOKEN_CURRENT,
};
use stateright::{Checker, HasDiscoveries, Model};

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn full() -> bool {
    std::env::var_os("LEADER_MODEL_FULL").is_some_and(|v| v != "0")
}

/// Every safety property of the model.
const SAFETY: [&str; 5] = [
    NO_OVERLAP,
    TOKENS_GROW,
    TOKEN_CURRENT,
    NO_STALE_WRITE,
    TICK_ONCE,
];

/// Checks every reachable state of `model` (depth-first, client ids up to permutation) and
/// fails with a trace if a safety property is violated, or if a sanity property this
/// configuration should reach is not (then the check proves nothing).
fn assert_passes(label: &str, model: LeaseModel) {
    let start = Instant::now();
    let checker = model
        .checker()
        .threads(threads())
        .symmetry_fn(LeaseModel::representative)
        .spawn_dfs()
        .join();
    println!(
        "{label}: {} states ({} unique up to client symmetry), max depth {}, {:.2?} on {} threads",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        start.elapsed(),
        threads()
    );
    for name in SAFETY {
        if let Some(path) = checker.discovery(name) {
            panic!(
                "{label}: `{name}` violated:\n{}",
                checker.model().format_trace(&path)
            );
        }
    }
    let model = checker.model();
    let mut sanity = vec![SOME_VIEW, SOME_WAITED_VIEW];
    if model.max_writes > 0 {
        sanity.push(SOME_WRITE);
    }
    if model.max_claims > 0 {
        sanity.push(SOME_TICK);
    }
    if model.protocol.fixes().server_marker {
        sanity.push(SOME_PROMPT_START);
    }
    for name in sanity {
        assert!(
            checker.discovery(name).is_some(),
            "{label}: `{name}` never reached"
        );
    }
}

/// Searches `model` for a violation of `property`, prints it and returns it: breadth-first
/// (the trace is a shortest one) or, with `dfs`, depth-first with client symmetry (far
/// sooner where the shortest trace is deep, but the trace may be longer).
fn find(label: &str, model: LeaseModel, property: &'static str, dfs: bool) -> String {
    let start = Instant::now();
    let builder = model
        .checker()
        .threads(threads())
        .finish_when(HasDiscoveries::AnyOf([property].into()));
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
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{label}: expected a counterexample to `{property}`"));
    let trace = checker.model().format_trace(&path);
    println!(
        "{label}: counterexample to `{property}` after {} states ({}), {:.2?}:\n{trace}",
        checker.state_count(),
        if dfs { "depth-first" } else { "breadth-first" },
        start.elapsed()
    );
    trace
}

fn assert_fails(label: &str, model: LeaseModel, property: &'static str) -> String {
    find(label, model, property, false)
}

/// A small configuration with per-client FIFO (one connection each): the traces it finds
/// are ones a real deployment can produce.
fn small(protocol: Protocol, faults: Faults, max_faults: u8) -> LeaseModel {
    LeaseModel {
        protocol,
        clients: 2,
        ttl: 2,
        margin: 0,
        max_time: 3,
        max_sends: 3,
        max_faults,
        faults,
        max_writes: 0,
        max_claims: 0,
        fifo: true,
    }
}

fn only(f: impl FnOnce(&mut Faults)) -> Faults {
    let mut faults = Faults::NONE;
    f(&mut faults);
    faults
}

/// Issue 10's faults without client crashes.
fn server_faults() -> Faults {
    only(|f| {
        f.lease_loss = true;
        f.data_loss = true;
        f.restore = true;
    })
}

/// V2 with every fix and the server-marker design (`lists`: with its change).
fn marker(lists: bool) -> Protocol {
    Protocol::V2(Fixes {
        server_marker: true,
        marker_lists_groups: lists,
        ..Fixes::ALL
    })
}

#[test]
fn v2_fixed_passes() {
    assert_passes("v2-fixed (ci)", LeaseModel::ci(Protocol::V2_FIXED));
}

/// Two lease-key losses: the faults the renewal's token is about (issue 40, item 2).
#[test]
fn v2_fixed_passes_two_lease_losses() {
    let model = LeaseModel {
        max_faults: 2,
        faults: only(|f| f.lease_loss = true),
        ..LeaseModel::ci(Protocol::V2_FIXED)
    };
    assert_passes("v2-fixed, two lease-key losses (ci)", model);
}

#[test]
fn v2_fixed_passes_full() {
    if !full() {
        println!("set LEADER_MODEL_FULL=1 for the larger checks");
        return;
    }
    assert_passes("v2-fixed (full)", LeaseModel::full(Protocol::V2_FIXED));
    let two_faults = LeaseModel {
        max_faults: 2,
        ..LeaseModel::ci(Protocol::V2_FIXED)
    };
    assert_passes("v2-fixed, two faults (full)", two_faults);
}

/// Fenced writes (`fence.lua` with the vouched-record rule) and cron claims (`claim.lua`):
/// two of each from leaders' bodies, delayed and reordered like every request.
#[test]
fn fenced_writes_and_claims_pass() {
    let (sends, faults) = if full() { (2, 2) } else { (2, 1) };
    for (label, writes, claims) in [("fenced writes", 2, 0), ("cron claims", 0, 2)] {
        let model = LeaseModel {
            max_sends: sends,
            max_faults: faults,
            faults: server_faults(),
            max_writes: writes,
            max_claims: claims,
            ..LeaseModel::ci(Protocol::V2_FIXED)
        };
        assert_passes(&format!("v2-fixed, {label}"), model);
    }
}

#[test]
fn v1_fails_on_lease_loss() {
    let trace = assert_fails(
        "v1, lease-key loss",
        small(Protocol::V1, only(|f| f.lease_loss = true), 1),
        NO_OVERLAP,
    );
    assert!(trace.contains("FAULT: lease key lost"));
}

#[test]
fn v1_fails_on_restore() {
    assert_fails(
        "v1, restore of an older state",
        small(Protocol::V1, only(|f| f.restore = true), 1),
        NO_OVERLAP,
    );
}

#[test]
fn v2_as_written_fails() {
    assert_fails(
        "v2 as written, issue-10 faults",
        small(Protocol::V2_AS_WRITTEN, Faults::ISSUE_10, 1),
        NO_OVERLAP,
    );
}

/// A case of [`each_fix_is_needed`].
struct Case {
    label: &'static str,
    /// Leaves the fix out.
    unfix: fn(&mut Fixes),
    faults: Faults,
    max_faults: u8,
    fifo: bool,
    ttl: u8,
    max_time: u8,
    max_sends: u8,
    max_writes: u8,
    /// The property violated without the fix.
    property: &'static str,
    /// Depth-first: finds a (longer) trace far sooner where the shortest one is deep.
    dfs: bool,
}

/// Each fix is necessary: with all the others, and only the faults it is about, the model
/// still finds a violation without it.
#[test]
fn each_fix_is_needed() {
    let base = Case {
        label: "",
        unfix: |_| {},
        faults: Faults::NONE,
        max_faults: 1,
        fifo: true,
        ttl: 2,
        max_time: 3,
        max_sends: 3,
        max_writes: 0,
        property: NO_OVERLAP,
        dfs: false,
    };
    let cases = [
        Case {
            label: "without reclaim_waits_for_floor (lost acquire reply, retry)",
            unfix: |f| f.reclaim_waits_for_floor = false,
            faults: only(|f| f.lease_loss = true),
            ..base
        },
        Case {
            label: "without release_keeps_floor (release during the safe start)",
            unfix: |f| f.release_keeps_floor = false,
            faults: only(|f| f.data_loss = true),
            ..base
        },
        Case {
            label: "without renew_needs_vouched_record (restore brings our key back)",
            unfix: |f| f.renew_needs_vouched_record = false,
            faults: only(|f| {
                f.lease_loss = true;
                f.restore = true;
            }),
            max_faults: 2,
            // The restart takes a tick; the restored lease key must outlive it.
            ttl: 3,
            dfs: true,
            ..base
        },
        Case {
            label: "without release_names_token (a release overtaken by our next acquire)",
            unfix: |f| f.release_names_token = false,
            max_faults: 0,
            fifo: false,
            ..base
        },
        Case {
            label: "without renew_names_token (our late acquire re-creates our lost lease)",
            unfix: |f| f.renew_names_token = false,
            faults: only(|f| f.lease_loss = true),
            max_faults: 2,
            fifo: false,
            // The overlap shows at t=2 already.
            max_time: 2,
            dfs: true,
            ..base
        },
        Case {
            label: "without fence_needs_vouched_record (a delayed write after a restore)",
            unfix: |f| f.fence_needs_vouched_record = false,
            faults: only(|f| {
                f.lease_loss = true;
                f.restore = true;
            }),
            max_faults: 2,
            fifo: false,
            max_sends: 2,
            max_writes: 2,
            property: NO_STALE_WRITE,
            dfs: true,
            ..base
        },
    ];
    for case in cases {
        let mut fixes = Fixes::ALL;
        (case.unfix)(&mut fixes);
        let mut model = small(Protocol::V2(fixes), case.faults, case.max_faults);
        model.fifo = case.fifo;
        model.ttl = case.ttl;
        model.max_time = case.max_time;
        model.max_sends = case.max_sends;
        model.max_writes = case.max_writes;
        find(case.label, model, case.property, case.dfs);
    }
}

/// The reviewer's finding (issue 40, item 2): with 3 requests per client, an instance's late
/// acquire on an old connection re-creates its own lost lease key under a new token, and a
/// renewal that does not say which leadership it extends then extends that one. The
/// shortest trace (breadth-first, about 15 s) only with `LEADER_MODEL_FULL=1`.
#[test]
fn renew_without_token_fails() {
    let fixes = Fixes {
        renew_names_token: false,
        ..Fixes::ALL
    };
    let mut model = small(Protocol::V2(fixes), only(|f| f.lease_loss = true), 2);
    // The acquire overtakes an earlier one of the same instance: another connection.
    model.fifo = false;
    model.max_time = 2;
    let trace = find(
        "v2-fixed without renew_names_token",
        model.clone(),
        NO_OVERLAP,
        !full(),
    );
    assert!(trace.contains("FAULT: lease key lost"));
    assert!(trace.contains("receives Renewed(1)"));
    // The same root: a view extended under a token that is no longer the record's.
    find(
        "v2-fixed without renew_names_token",
        model,
        TOKEN_CURRENT,
        true,
    );
}

/// Outside the fault model: an older state served by the process that wrote it (fail-back
/// to a demoted primary, `DEBUG RELOAD`) is vouched for, and even v2-fixed overlaps.
#[test]
fn same_run_restore_breaks_v2_fixed() {
    assert_fails(
        "v2-fixed, older state under the same run_id",
        small(
            Protocol::V2_FIXED,
            only(|f| {
                f.lease_loss = true;
                f.restore_same_run = true;
            }),
            2,
        ),
        NO_OVERLAP,
    );
}

/// The server-marker design (issue 40, item 10) holds against one fault of every kind it
/// is about (two with `LEADER_MODEL_FULL=1`), and a group with no record does lead at once.
#[test]
fn server_marker_passes_one_fault() {
    let model = LeaseModel {
        protocol: marker(false),
        max_sends: 2,
        max_faults: if full() { 2 } else { 1 },
        faults: Faults::MARKER,
        ..LeaseModel::ci(Protocol::V2_FIXED)
    };
    assert_passes("server marker", model);
}

/// ... but not against an eviction counter that goes back: the record and the lease key
/// are evicted and `CONFIG RESETSTAT` brings `evicted_keys` back to the marker's value
/// before the next script, which then takes the lost record for a group never led.
#[test]
fn server_marker_fails_on_resetstat() {
    let model = LeaseModel {
        protocol: marker(false),
        max_sends: 2,
        max_faults: 3,
        faults: only(|f| {
            f.lease_loss = true;
            f.evict_any = true;
            f.reset_stat = true;
        }),
        ..LeaseModel::ci(Protocol::V2_FIXED)
    };
    let trace = find(
        "server marker, eviction + RESETSTAT",
        model,
        NO_OVERLAP,
        true,
    );
    assert!(trace.contains("CONFIG RESETSTAT"));
    assert!(trace.contains("record evicted"));
}

/// With the marker listing the groups that have a record (and not reading the counter),
/// the same faults do no harm, nor does any one of the others (two with
/// `LEADER_MODEL_FULL=1`, which also checks fenced writes and claims under the marker).
#[test]
fn server_marker_listing_groups_passes() {
    let model = LeaseModel {
        protocol: marker(true),
        max_sends: 2,
        max_faults: 3,
        faults: only(|f| {
            f.lease_loss = true;
            f.evict_any = true;
            f.reset_stat = true;
        }),
        ..LeaseModel::ci(Protocol::V2_FIXED)
    };
    assert_passes("server marker listing groups, evictions", model);
    let model = LeaseModel {
        protocol: marker(true),
        max_sends: 2,
        max_faults: if full() { 2 } else { 1 },
        faults: Faults::MARKER,
        ..LeaseModel::ci(Protocol::V2_FIXED)
    };
    assert_passes("server marker listing groups", model.clone());
    if full() {
        // The fenced writes' and claims' rules read `run` too: the epoch, with the marker.
        for (label, writes, claims) in [("fenced writes", 2, 0), ("cron claims", 0, 2)] {
            let model = LeaseModel {
                max_faults: 1,
                max_writes: writes,
                max_claims: claims,
                ..model.clone()
            };
            assert_passes(&format!("server marker listing groups, {label}"), model);
        }
    }
}
