//! What every group of one runtime shares: the backend, the config, where
//! events and callbacks go, and the stop signal. Built by
//! [`Runtime::new`](crate::Runtime::new), read by each election.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::backend::heir::Heir;
use crate::backend::{AttemptBatcher, Backend, Channels, NoticeSink, RedisBackend};
use crate::config::{BackendConfig, Config};
use crate::election::balance::{spawn_heartbeat, Balance};
use crate::group::lease::Lease;
use crate::names::{control_channel, members_key, release_channel};
use crate::observe::events::{Event, LostReason};
use crate::observe::outage::Outage;
use crate::Result;

/// What every election of one runtime shares.
pub(crate) struct Ctx {
    pub(crate) backend: Backend,
    /// The followers' acquire attempts, batched (see `backend/batch.rs`).
    pub(crate) attempts: AttemptBatcher,
    /// Balanced leadership, when configured (see `balance.rs`).
    pub(crate) balance: Option<Arc<Balance>>,
    pub(crate) config: Config,
    pub(crate) events: broadcast::Sender<Event>,
    pub(crate) callbacks: mpsc::UnboundedSender<Callback>,
    pub(crate) stop: CancellationToken,
    /// Whether the release-notice connection is up (followers then wait for
    /// a notice rather than polling every `retry_interval`).
    pub(crate) notices_up: Arc<AtomicBool>,
    pub(crate) release_channel: String,
    /// Failed backend calls of every group, reported once a minute.
    pub(crate) outage: Outage,
}

/// A user callback, run on the callbacks' own thread.
pub(crate) enum Callback {
    Elected(Arc<str>, Lease),
    Lost(Arc<str>, LostReason),
}

impl Ctx {
    /// The backend `config` names (no network yet), the event channel, and
    /// the callbacks' thread if a callback is set. Inside a tokio runtime.
    pub(crate) fn new(config: Config) -> Result<Self> {
        // One follower per group takes a crashed leader's lease at its
        // expiry (`backend/heir.rs`): on Redis, with batched attempts, and
        // not with balanced leadership (a crash frees only a share there,
        // and the earlier attempts would cost more calls than they save).
        let heir = (!config.unbatched_attempts && !config.balance)
            .then(|| Heir::for_timings(config.ttl, config.renew_interval))
            .flatten();
        let (backend, lead) = match &config.backend {
            BackendConfig::Redis(redis) => (
                Backend::Redis(
                    RedisBackend::new(redis, config.call_timeout, true)?.with_heir(heir),
                ),
                heir.map_or(Duration::ZERO, |h| h.lead),
            ),
            BackendConfig::Memory(memory) => (Backend::Memory(memory.clone()), Duration::ZERO),
        };
        let stop = CancellationToken::new();
        let balance = config.balance.then(|| {
            let balance = Arc::new(Balance::new(&config.instance_id));
            spawn_heartbeat(
                backend.clone(),
                members_key(&config.key_prefix),
                balance.clone(),
                config.ttl,
                config.renew_interval,
                config.call_timeout,
                stop.clone(),
            );
            balance
        });
        let (events, _) = broadcast::channel(1024);
        let (callbacks, callback_rx) = mpsc::unbounded_channel();
        if config.on_elected.is_some() || config.on_lost.is_some() {
            spawn_callback_thread(config.clone(), callback_rx);
        }
        let outage = Outage::new(config.retry_interval, config.call_timeout);
        Ok(Self {
            attempts: AttemptBatcher::new(
                backend.clone(),
                !config.unbatched_attempts,
                config.call_timeout,
                lead,
            ),
            balance,
            backend,
            release_channel: release_channel(&config.key_prefix),
            config,
            events,
            callbacks,
            stop,
            notices_up: Arc::new(AtomicBool::new(false)),
            outage,
        })
    }

    /// Listen for release notices and control requests until the runtime
    /// stops, handing each to `sink`.
    pub(crate) fn spawn_notices(&self, sink: NoticeSink) {
        self.backend.spawn_notices(
            Channels {
                release: self.release_channel.clone(),
                control: control_channel(&self.config.key_prefix),
            },
            sink,
            self.notices_up.clone(),
            self.config.retry_interval,
            self.stop.clone(),
        );
    }
}

/// Run user callbacks on a thread of their own, in order, so a slow or
/// blocking callback never delays an election (not even on a current-thread
/// tokio runtime). A panicking callback is logged and does not stop the others.
/// The thread ends when the last election (the last sender) is gone.
fn spawn_callback_thread(config: Config, mut rx: mpsc::UnboundedReceiver<Callback>) {
    let spawned = std::thread::Builder::new()
        .name("leader-callbacks".to_owned())
        .spawn(move || run_callbacks(&config, &mut rx));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the callback thread; on_elected/on_lost will not be called");
    }
}

fn run_callbacks(config: &Config, rx: &mut mpsc::UnboundedReceiver<Callback>) {
    while let Some(callback) = rx.blocking_recv() {
        let outcome = match &callback {
            Callback::Elected(group, lease) => match &config.on_elected {
                Some(f) => catch_unwind(AssertUnwindSafe(|| f(group, lease))),
                None => Ok(()),
            },
            Callback::Lost(group, reason) => match &config.on_lost {
                Some(f) => catch_unwind(AssertUnwindSafe(|| f(group, *reason))),
                None => Ok(()),
            },
        };
        if outcome.is_err() {
            tracing::error!("an on_elected/on_lost callback panicked");
        }
    }
}
