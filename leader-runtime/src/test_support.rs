//! What the runtime's unit tests share: runtimes on the in-memory backend
//! with short, round timings (for paused time), and helpers to wait for
//! transitions.

use std::time::Duration;

use tokio::sync::broadcast;

use crate::{Config, ConfigBuilder, Event, MemoryBackend, Runtime};

pub(crate) const TTL: Duration = Duration::from_secs(3);
pub(crate) const RENEW: Duration = Duration::from_secs(1);
pub(crate) const RETRY: Duration = Duration::from_millis(500);
/// Default drift margin for TTL: 1% + 2 ms.
pub(crate) const MARGIN: Duration = Duration::from_millis(32);
pub(crate) const G: &str = "jobs";

/// Instance `id` on `mem` with the timings above: `TTL`, `RENEW` and `RETRY`.
pub(crate) fn instance(mem: &MemoryBackend, id: &str) -> Runtime {
    start(builder(mem, id).retry_interval(RETRY))
}

/// The config of instance `id` on `mem`: `TTL` and `RENEW`, the rest default.
pub(crate) fn builder(mem: &MemoryBackend, id: &str) -> ConfigBuilder {
    Config::builder()
        .memory(mem.clone())
        .ttl(TTL)
        .renew_interval(RENEW)
        .instance_id(id)
}

/// A runtime with the config `builder` makes.
pub(crate) fn start(builder: ConfigBuilder) -> Runtime {
    Runtime::new(builder.build().unwrap()).unwrap()
}

/// Let every ready task run without moving the clock.
pub(crate) async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// The next leadership transition, skipping renewals and backend errors.
pub(crate) async fn next_transition(rx: &mut broadcast::Receiver<Event>) -> Event {
    loop {
        match rx.recv().await.unwrap() {
            Event::Renewed { .. } | Event::BackendError { .. } => continue,
            e => return e,
        }
    }
}

/// What a `tracing` subscriber writes, kept for a test to read.
#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// The lines written so far at `level` (e.g. "WARN") that contain
    /// `containing`.
    pub(crate) fn lines(&self, level: &str, containing: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(level) && l.contains(containing))
            .map(str::to_owned)
            .collect()
    }

    /// A subscriber that writes every event at DEBUG and above here, without
    /// colours.
    pub(crate) fn debug_subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish()
    }
}

thread_local! {
    /// Where this thread's events go under [`capture_this_thread`].
    static THREAD_CAPTURE: std::cell::RefCell<Option<Captured>> =
        const { std::cell::RefCell::new(None) };
}

/// Writes to the capture of the thread that logs, if it has one.
struct ThisThread;

impl std::io::Write for ThisThread {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        THREAD_CAPTURE.with(|c| match &mut *c.borrow_mut() {
            Some(captured) => captured.write(buf),
            None => Ok(buf.len()),
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Until the guard drops, what this thread logs at DEBUG and above (without
/// times) goes to `captured`, through one process-wide subscriber. For a
/// test that runs for long beside others: a thread's default subscriber
/// (`set_default`) lost every event now and then while another test ran in
/// parallel, as callsites registered from that test's thread kept a cached
/// "not interested"; a global subscriber is always asked.
pub(crate) fn capture_this_thread(captured: &Captured) -> ThreadCapture {
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_writer(|| ThisThread)
            .finish();
        // Fails only if a global subscriber exists: then that one gets it all.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
    THREAD_CAPTURE.with(|c| *c.borrow_mut() = Some(captured.clone()));
    ThreadCapture(())
}

/// Ends [`capture_this_thread`] when dropped.
pub(crate) struct ThreadCapture(());

impl Drop for ThreadCapture {
    fn drop(&mut self) {
        THREAD_CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}

/// A current-thread tokio runtime with paused time, for a test that must
/// set a `tracing` subscriber around it (`with_default`: the elections log
/// on this thread).
pub(crate) fn paused_current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
