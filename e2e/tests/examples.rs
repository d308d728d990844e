//! Runs the examples that need no Redis and checks what they print.
//!
//! Each example keeps its demo in a `pub async fn run(say)`, and its `main`
//! only prints; this file compiles the example sources as modules and calls
//! `run` directly, so the test needs no second cargo and no child process.
//! `programmatic` sets the process-global runtime: it is the only test here
//! that may touch it.

#[allow(dead_code)] // `main` is the example's, unused here
#[path = "../../examples/quickstart.rs"]
mod quickstart;

#[allow(dead_code)]
#[path = "../../examples/programmatic.rs"]
mod programmatic;

fn lines_containing<'a>(lines: &'a [String], needle: &str) -> Vec<&'a String> {
    lines.iter().filter(|l| l.contains(needle)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_runs_each_tick_once_and_hands_over() {
    let mut lines = Vec::new();
    let report = quickstart::run(|line| lines.push(line))
        .await
        .expect("quickstart ran");
    let output = lines.join("\n");

    assert_eq!(report.runs.len(), quickstart::TICKS as usize, "{output}");
    for (i, ran) in report.runs.iter().enumerate() {
        assert_eq!(ran.len(), 1, "tick {} ran on {ran:?}\n{output}", i + 1);
    }
    let stop = quickstart::STOP_AFTER_TICK as usize;
    assert!(
        report.runs[..stop]
            .iter()
            .all(|ran| ran == &[report.stopped_leader]),
        "{output}"
    );
    assert!(
        report.runs[stop..]
            .iter()
            .all(|ran| ran == &[report.new_leader]),
        "{output}"
    );
    assert_ne!(report.stopped_leader, report.new_leader, "{output}");
    assert!(
        report.handover <= quickstart::HANDOVER_BOUND,
        "handover took {:?}\n{output}",
        report.handover
    );
    assert!(report.tokens.1 > report.tokens.0, "{output}");
    assert!(report.ok(), "{output}");

    // What a user sees.
    assert_eq!(
        lines_containing(&lines, "ran the job").len(),
        quickstart::TICKS as usize,
        "{output}"
    );
    let took_over = lines_containing(&lines, "took over");
    assert_eq!(took_over.len(), 1, "{output}");
    assert!(
        took_over[0].starts_with(report.new_leader),
        "{}",
        took_over[0]
    );
    assert!(
        output.contains("each ran on exactly one instance: yes"),
        "{output}"
    );
    assert!(output.contains("handover within 100 ms: yes"), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programmatic_walks_through_the_api() {
    let mut lines = Vec::new();
    programmatic::run(|line| lines.push(line))
        .await
        .expect("programmatic ran");
    let output = lines.join("\n");
    let expected = [
        "web-1: run_if_leader ran the body: yes, under fencing token",
        "web-1: event elected: web-1 leads \"reports\"",
        "web-1: is_leader(\"reports\") = true",
        "web-1: leader_id(\"reports\") = Some(\"web-1\")",
        "web-2: run_if_leader ran the body: None; is_leader = false; leader_id = Some(\"web-1\")",
        "web-1: step_down(\"reports\")",
        "web-1: event lost: web-1 no longer leads \"reports\" (stepped_down)",
        "web-2: event elected: web-2 leads \"reports\"",
        "web-1: is_leader = false; leader_id = Some(\"web-2\"); run_if_leader ran the body: false",
        "web-2: shutdown()",
        "web-2: event lost: web-2 no longer leads \"reports\" (shutdown)",
        "web-1: event elected: web-1 leads \"reports\"",
        "web-1: leader_id = Some(\"web-1\")",
        "web-1: stats: elected 2, lost 1 (stepped down 1)",
        "web-1: shutdown()",
        "web-1: event lost: web-1 no longer leads \"reports\" (shutdown)",
        "web-1: is_leader = false",
    ];
    assert_eq!(lines.len(), expected.len(), "{output}");
    for (line, want) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(want),
            "expected {want:?}, got {line:?}\n{output}"
        );
    }
    // Fencing tokens grow across the three leaderships.
    let tokens: Vec<u64> = lines
        .iter()
        .filter(|l| l.contains("event elected"))
        .filter_map(|l| {
            l.rsplit("token ")
                .next()?
                .trim_end_matches(')')
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(tokens.len(), 3, "{output}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}
