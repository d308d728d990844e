//! The programmatic API, without the attribute: `is_leader`, `leader_id`,
//! `run_if_leader`, `current_lease`, `step_down`, `stats`, `subscribe` and
//! `shutdown`.
//!
//! This process is the instance `web-1`, set up with `leader_runtime::init`
//! as a service would be; an explicit `Runtime` plays a second replica,
//! `web-2`. Both keep their leases in one in-memory store, so no Redis is
//! needed:
//!
//! ```text
//! cargo run --example programmatic
//! ```
//!
//! Against Redis, replace `.memory(store.clone())` with
//! `.redis_url("redis://127.0.0.1:6379")` and run `web-2` as its own process.

use std::error::Error;
use std::time::Duration;

use leader_runtime::{Config, Event, MemoryBackend, Runtime};
use tokio::sync::broadcast::{self, error::RecvError};

/// The group both instances compete for.
pub const GROUP: &str = "reports";
/// Lease length.
pub const TTL: Duration = Duration::from_secs(1);
/// The leader's heartbeat.
pub const RENEW_INTERVAL: Duration = Duration::from_millis(300);

type BoxError = Box<dyn Error + Send + Sync>;

/// Run the demo, handing every line of output to `say`. Uses the global
/// runtime, so it can run once per process.
///
/// # Errors
///
/// A bad configuration, a backend error, or a transition that did not come.
pub async fn run(mut say: impl FnMut(String)) -> Result<(), BoxError> {
    let store = MemoryBackend::new();
    let config = |id: &str| {
        Config::builder()
            .memory(store.clone())
            .instance_id(id)
            .ttl(TTL)
            .renew_interval(RENEW_INTERVAL)
            .build()
    };

    // This process: the global runtime behind the free functions.
    leader_runtime::init(config("web-1")?)?;
    // Transitions of every group on this instance, from now on.
    let mut events = leader_runtime::subscribe();

    // The first call naming a group starts its election and waits for the
    // first round, so the winner's first run is not lost. (`is_leader` does
    // not wait: called first, it starts the election and says false.)
    let ran = leader_runtime::run_if_leader(GROUP, || async {
        // Inside the body, the lease it runs under: group and fencing token.
        let lease = leader_runtime::current_lease().ok_or("no lease in a gated body")?;
        Ok::<_, BoxError>(lease.token())
    })
    .await
    .transpose()?;
    say(format!(
        "web-1: run_if_leader ran the body: {}",
        match ran {
            Some(token) => format!("yes, under fencing token {token}"),
            None => "no".to_owned(),
        }
    ));
    say(format!(
        "web-1: event {}",
        next_transition(&mut events).await?
    ));
    say(format!(
        "web-1: is_leader({GROUP:?}) = {} (a local check, no network)",
        leader_runtime::is_leader(GROUP)
    ));
    say(format!(
        "web-1: leader_id({GROUP:?}) = {:?} (asked of the backend)",
        leader_runtime::leader_id(GROUP).await?
    ));

    // A second replica.
    let web2 = Runtime::new(config("web-2")?)?;
    let mut web2_events = web2.subscribe();
    let ran = web2.run_if_leader(GROUP, || async { "web-2's work" }).await;
    say(format!(
        "web-2: run_if_leader ran the body: {ran:?}; is_leader = {}; leader_id = {:?}",
        web2.is_leader(GROUP),
        web2.leader_id(GROUP).await?
    ));

    // Hand the lease over: web-1 waits for its gated runs in flight, releases,
    // and stays out of the race for one ttl or until web-2 releases it.
    say("web-1: step_down(\"reports\")".to_owned());
    leader_runtime::step_down(GROUP).await?;
    say(format!(
        "web-1: event {}",
        next_transition(&mut events).await?
    ));
    say(format!(
        "web-2: event {}",
        next_transition(&mut web2_events).await?
    ));
    say(format!(
        "web-1: is_leader = {}; leader_id = {:?}; run_if_leader ran the body: {}",
        leader_runtime::is_leader(GROUP),
        leader_runtime::leader_id(GROUP).await?,
        leader_runtime::run_if_leader(GROUP, || async {})
            .await
            .is_some()
    ));

    // web-2 stops; its release notice brings web-1 back at once.
    say("web-2: shutdown()".to_owned());
    web2.shutdown().await;
    say(format!(
        "web-2: event {}",
        next_transition(&mut web2_events).await?
    ));
    say(format!(
        "web-1: event {}",
        next_transition(&mut events).await?
    ));
    say(format!(
        "web-1: leader_id = {:?}",
        leader_runtime::leader_id(GROUP).await?
    ));

    let stats = leader_runtime::stats(GROUP).ok_or("no stats for a used group")?;
    say(format!(
        "web-1: stats: elected {}, lost {} (stepped down {}), acquire attempts {}, renewals {}",
        stats.elected,
        stats.lost(),
        stats.lost_stepped_down,
        stats.acquire_attempts,
        stats.renewals
    ));

    // At exit: release every lease, after the gated runs in flight finished.
    say("web-1: shutdown()".to_owned());
    leader_runtime::shutdown().await;
    say(format!(
        "web-1: event {}",
        next_transition(&mut events).await?
    ));
    say(format!(
        "web-1: is_leader = {}",
        leader_runtime::is_leader(GROUP)
    ));
    Ok(())
}

/// The next transition (skipping renewals), within a few seconds.
async fn next_transition(events: &mut broadcast::Receiver<Event>) -> Result<String, BoxError> {
    let next = async {
        loop {
            match events.recv().await {
                Ok(Event::Renewed { .. }) | Err(RecvError::Lagged(_)) => continue,
                Ok(event) => return Ok(describe(&event)),
                Err(RecvError::Closed) => return Err("the event channel closed"),
            }
        }
    };
    Ok(tokio::time::timeout(Duration::from_secs(3), next)
        .await
        .map_err(|_| "no transition within 3 s")??)
}

fn describe(event: &Event) -> String {
    match event {
        Event::Elected {
            group,
            instance_id,
            token,
            ..
        } => format!("elected: {instance_id} leads {group:?} (token {token})"),
        Event::Lost {
            group,
            instance_id,
            reason,
            ..
        } => format!("lost: {instance_id} no longer leads {group:?} ({reason})"),
        Event::BackendError { group, message } => format!("backend error in {group:?}: {message}"),
        other => format!("{other:?}"),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    run(|line| println!("{line}")).await
}
