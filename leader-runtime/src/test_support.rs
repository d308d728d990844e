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

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
