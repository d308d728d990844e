//! The checker of leadership windows, on synthetic logs: it must pass a
//! clean history and catch every kind of violation.

mod support;

use support::checker::{parse_line, History, Line, ProcessLog, Violation};

fn log(name: &str, lines: &[&str]) -> ProcessLog {
    ProcessLog::new(name, lines.iter().map(|l| (*l).to_owned()).collect())
}

/// Two leaderships one after the other, with renewals, runs and a handover.
fn clean() -> Vec<ProcessLog> {
    vec![
        log(
            "a",
            &[
                "ready a 100 1000",
                "elected 10 2000 1100",
                "begin 10 1200",
                "run 10 1190 1200 1250",
                "renewed 10 3000 1500",
                "run 10 2490 2500 2600",
                "lost 10 shutdown 2700",
                "exit 2800",
            ],
        ),
        log(
            "b",
            &[
                "ready b 101 1000",
                "some unrelated output",
                "elected 11 3800 2750",
                "run 11 2790 2800 2850",
                "write 11 1 ok 2810 2820",
            ],
        ),
    ]
}

#[test]
fn parses_every_line_kind() {
    assert_eq!(
        parse_line("elected 7 200 100"),
        Some(Line::Elected {
            token: 7,
            valid_until: 200,
            at: 100
        })
    );
    assert_eq!(
        parse_line("lost 7 superseded 150"),
        Some(Line::Lost {
            token: 7,
            reason: "superseded".into(),
            at: 150
        })
    );
    assert_eq!(
        parse_line("write 7 0 stale 1 2"),
        Some(Line::Write {
            token: 7,
            believed: false,
            result: "stale".into(),
            start: 1,
            end: 2
        })
    );
    assert_eq!(
        parse_line("backend_error 5 backend error for group `chaos`: x"),
        Some(Line::BackendError {
            at: 5,
            message: "backend error for group `chaos`: x".into()
        })
    );
    assert_eq!(parse_line("elected 7 notanumber 100"), None);
    assert_eq!(parse_line("2024-01-01 INFO elected"), None);
}

#[test]
fn a_clean_history_passes() {
    let h = History::from_logs(&clean());
    assert_eq!(h.check(), vec![]);
    assert_eq!(h.windows.len(), 2);
    // A's window ends at its `lost` line (before its valid_until of 3000).
    assert_eq!((h.windows[0].start, h.windows[0].end), (1100, 2700));
    assert_eq!(h.windows[1].end, 3800);
    assert_eq!(h.runs.len(), 3);
    assert_eq!(h.writes.len(), 1);
    assert_eq!(h.failover_after(2700), Some(50));
    assert_eq!(h.failover_after(2751), None);
}

#[test]
fn window_ends_at_reported_valid_until_not_log_time() {
    // Expired: the loss is logged late (at 5000), the view ended at 3000.
    let h = History::from_logs(&[
        log(
            "a",
            &[
                "elected 1 2000 1000",
                "renewed 1 3000 1500",
                "lost 1 expired 5000",
            ],
        ),
        log("b", &["elected 2 9000 3500"]),
    ]);
    assert_eq!(h.windows[0].end, 3000);
    assert_eq!(h.check(), vec![]);
}

#[test]
fn catches_an_overlap() {
    // B elected at 2900 while A's view lasts until 3000.
    let h = History::from_logs(&[
        log("a", &["elected 1 2000 1000", "renewed 1 3000 1500"]),
        log("b", &["elected 2 4000 2900"]),
    ]);
    let v = h.check();
    assert!(
        matches!(&v[..], [Violation::Overlap { by_ns: 100, .. }]),
        "{v:?}"
    );
}

#[test]
fn catches_an_overlap_hidden_behind_a_short_window() {
    // C overlaps A (long) though not B (short, inside A).
    let h = History::from_logs(&[
        log("a", &["elected 1 5000 1000"]),
        log("b", &["elected 2 1500 1200", "lost 2 superseded 1400"]),
        log("c", &["elected 3 9000 4000"]),
    ]);
    let overlaps = h
        .check()
        .into_iter()
        .filter(|v| matches!(v, Violation::Overlap { .. }))
        .count();
    assert_eq!(overlaps, 2, "{:?}", h.check());
}

#[test]
fn catches_a_run_outside_its_window() {
    for run in [
        "run 1 890 900 950",    // before the elected line
        "run 1 3000 3000 3100", // called at the end of the view
        "run 1 3500 3500 3600", // after it
        "run 9 1500 1500 1600", // under a token this process never held
    ] {
        let h = History::from_logs(&[log(
            "a",
            &["elected 1 2000 1000", "renewed 1 3000 1500", run],
        )]);
        let v = h.check();
        assert!(
            matches!(&v[..], [Violation::RunOutsideWindow { .. }]),
            "{run}: {v:?}"
        );
    }
}

#[test]
fn a_run_called_inside_its_window_may_start_after_it() {
    // Called at 2990, admitted by the gate before the view ended at 3000,
    // its body read the clock only at 3005 (the process was preempted).
    let h = History::from_logs(&[log(
        "a",
        &[
            "elected 1 2000 1000",
            "renewed 1 3000 1500",
            "run 1 2990 3005 3100",
        ],
    )]);
    assert!(h.check().is_empty(), "{:?}", h.check());
}

#[test]
fn catches_a_run_after_a_loss() {
    // Superseded at 1600: a run starting at 1700 is outside, although the
    // last valid_until (3000) is later.
    let h = History::from_logs(&[log(
        "a",
        &[
            "elected 1 2000 1000",
            "renewed 1 3000 1500",
            "lost 1 superseded 1600",
            "run 1 1700 1700 1800",
        ],
    )]);
    assert!(matches!(
        &h.check()[..],
        [Violation::RunOutsideWindow { .. }]
    ));
}

#[test]
fn catches_a_token_that_does_not_grow() {
    for second in ["elected 5 9000 4000", "elected 4 9000 4000"] {
        let h = History::from_logs(&[log("a", &["elected 5 3000 1000"]), log("b", &[second])]);
        let v = h.check();
        assert!(
            matches!(&v[..], [Violation::TokenNotGrowing { .. }]),
            "{second}: {v:?}"
        );
    }
}

#[test]
fn catches_an_inconsistent_log() {
    let h = History::from_logs(&[log(
        "a",
        &[
            "renewed 1 3000 1500",
            "elected 2 3000 2000",
            "lost 3 expired 2500",
        ],
    )]);
    let malformed = h
        .check()
        .into_iter()
        .filter(|v| matches!(v, Violation::Malformed { .. }))
        .count();
    assert_eq!(malformed, 2);
}

#[test]
#[should_panic(expected = "safety violation")]
fn assert_safe_panics_on_a_violation() {
    let h = History::from_logs(&[
        log("a", &["elected 1 3000 1000"]),
        log("b", &["elected 2 4000 2000"]),
    ]);
    h.assert_safe(&String::new);
}

/// Lines of several groups (`GROUPS`): windows of different groups may
/// overlap, windows of one group may not, and each group's tokens grow on
/// their own.
#[test]
fn each_group_is_checked_on_its_own() {
    let logs = vec![
        log(
            "a",
            &[
                "ready a 100 1000",
                "@g-0 elected 10 2000 1100",
                "@g-1 elected 3 2000 1100",
                "@g-0 run 10 1190 1200 1250",
                "@g-1 lost 3 stepped_down 1300",
                "exit 2800",
            ],
        ),
        log(
            "b",
            &[
                "ready b 101 1000",
                "@g-1 elected 4 2400 1400",
                "@g-1 run 4 1490 1500 1550",
            ],
        ),
    ];
    let groups = History::per_group(&logs);
    assert_eq!(groups.keys().collect::<Vec<_>>(), ["g-0", "g-1"]);
    for (group, history) in &groups {
        assert_eq!(history.check(), vec![], "{group}");
    }
    assert_eq!(groups["g-1"].windows.len(), 2);
    // Read as one group, g-0's token 10 before g-1's 4 is a violation.
    assert!(!History::from_logs(&logs).check().is_empty());
    assert_eq!(
        parse_line("@g-0 elected 10 2000 1100"),
        parse_line("elected 10 2000 1100")
    );

    // b elected in g-1 while a still held it: caught in g-1 only.
    let mut overlapping = logs.clone();
    overlapping[1].lines[1] = "@g-1 elected 4 2400 1250".into();
    overlapping[1].lines[2] = "@g-1 run 4 1260 1270 1280".into();
    let groups = History::per_group(&overlapping);
    assert_eq!(groups["g-0"].check(), vec![]);
    assert!(matches!(
        groups["g-1"].check().as_slice(),
        [Violation::Overlap { by_ns: 50, .. }]
    ));
}

/// A log that says it lost events, or an `elected` line without its
/// transition time (its window may start too late), is not trusted: a
/// malformed-log violation, in every group of the process for `lagged`.
#[test]
fn lagged_and_unstamped_logs_are_violations() {
    // b printed no line of g-1 (nor of g-0) before it lagged.
    let lagged = vec![
        log("a", &["@g-0 elected 10 2000 1100"]),
        log("b", &["@g-1 elected 11 2000 1100"]),
        log("c", &["ready c 102 1000", "lagged 3 1200"]),
    ];
    let groups = History::per_group(&lagged);
    for group in ["g-0", "g-1"] {
        assert!(
            matches!(
                groups[group].check().as_slice(),
                [Violation::Malformed { .. }]
            ),
            "{group}: {:?}",
            groups[group].check()
        );
    }
    let unstamped = vec![log(
        "a",
        &["@g-0 elected 10 2000 1100", "@g-0 unstamped 10 1100"],
    )];
    assert!(matches!(
        History::per_group(&unstamped)["g-0"].check().as_slice(),
        [Violation::Malformed { .. }]
    ));
    assert_eq!(
        parse_line("unstamped 10 1100"),
        Some(Line::Unstamped {
            token: 10,
            at: 1100
        })
    );
}
