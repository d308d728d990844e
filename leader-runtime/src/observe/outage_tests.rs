//! The once-a-minute WARN while the backend keeps failing, read from a
//! `tracing` subscriber on paused time.

use std::time::Duration;

use crate::test_support::{capture_this_thread, instance, Captured, G};
use crate::MemoryBackend;

/// The span of a report: "in the last 59.5s".
fn over(line: &str) -> Duration {
    let at = line.find("in the last ").expect(line) + "in the last ".len();
    let secs: String = line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    Duration::from_secs_f64(secs.parse().expect(line))
}

/// The `failures=N` field of a log line.
fn failures(line: &str) -> u64 {
    let at = line.find("failures=").expect(line) + "failures=".len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect(line)
}

#[tokio::test(start_paused = true)]
async fn a_warn_with_the_count_every_minute_while_the_backend_keeps_failing() {
    let captured = Captured::default();
    // A current-thread runtime: the elections log on this thread.
    let _capture = capture_this_thread(&captured);

    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let b = instance(&mem, "b");
    a.ready_for([G, "other"], Duration::from_secs(1))
        .await
        .unwrap();
    b.ready_for([G], Duration::from_secs(1)).await.unwrap();
    mem.set_available(false);
    tokio::time::sleep(Duration::from_secs(55)).await;
    let errors = captured.lines("ERROR", "backend call failed");
    assert_eq!(errors.len(), 3, "one per group and runtime: {errors:#?}");
    assert!(captured.lines("WARN", "keep failing").is_empty());

    // To 190 s: the third report of each runtime comes at most 180 s after
    // its first failure, which may lag the outage by up to a renewal or an
    // attempt on the wall-clock grids; a fourth not before 3 × 55 s after
    // the first report (≥ 220 s).
    tokio::time::sleep(Duration::from_secs(2 * 60 + 15)).await;
    let warns = captured.lines("WARN", "keep failing");
    // By then a (two groups) and b (one) each reported three times, each
    // within a minute of the last report (and not much sooner).
    assert_eq!(warns.len(), 6, "{warns:#?}");
    for line in &warns {
        let over = over(line);
        assert!(
            over <= Duration::from_secs(60) && over >= Duration::from_secs(55),
            "{line}"
        );
        // Each group retries every 500 ms (RETRY) once its view has ended:
        // about 120 failures a minute for two groups, 60 for one (more in the
        // first minute: a leader retries its renew every 100 ms).
        let n = failures(line);
        assert!((55..=400).contains(&n), "{line}");
        assert!(
            line.contains("unavailable"),
            "the last error is named: {line}"
        );
    }
    assert_eq!(captured.lines("ERROR", "backend call failed").len(), 3);

    // Back: no more reports; the next outage starts with an ERROR again.
    mem.set_available(true);
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    assert_eq!(captured.lines("WARN", "keep failing").len(), 6);
    mem.set_available(false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(captured.lines("WARN", "keep failing").len(), 6);
    assert_eq!(captured.lines("ERROR", "backend call failed").len(), 6);
}
