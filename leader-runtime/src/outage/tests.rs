//! The once-a-minute WARN while the backend keeps failing, read from a
//! `tracing` subscriber on paused time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::test_support::{instance, G};
use crate::MemoryBackend;

/// What a `tracing` subscriber writes, kept for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self, level: &str, containing: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(level) && l.contains(containing))
            .map(str::to_owned)
            .collect()
    }
}

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
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .without_time()
        .with_writer(move || writer.clone())
        .finish();
    // A current-thread runtime: the elections log on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);

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

    tokio::time::sleep(Duration::from_secs(2 * 60 + 5)).await;
    let warns = captured.lines("WARN", "keep failing");
    // In 180 s, a (two groups) and b (one) each report three times, each
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
