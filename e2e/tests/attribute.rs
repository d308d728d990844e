//! `#[leader_only(default)]` on trait impls, plain (`async fn` in a trait)
//! and `#[async_trait]` (a sync fn returning a boxed future, gated for the
//! future's whole life): the bodies run in their admission's scope
//! (`current_lease()`), `step_down` waits for them before it releases, and a
//! follower gets the default without running them.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use leader_runtime::{current_lease, leader_only, Config, MemoryBackend, Runtime};
use tokio::sync::Notify;

fn instance(mem: &MemoryBackend, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .memory(mem.clone())
            .ttl(Duration::from_secs(3))
            .renew_interval(Duration::from_secs(1))
            .instance_id(id)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// What the bodies saw and did, in order, and when to let them finish.
#[derive(Default)]
struct Probe {
    started: Notify,
    release: Notify,
    log: Mutex<Vec<String>>,
}

impl Probe {
    fn log(&self, what: String) {
        self.log.lock().unwrap().push(what);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// A body: note the lease it sees, say it started, run until released.
async fn hold(probe: &Probe, name: &str) -> u64 {
    let group = current_lease().map(|lease| lease.group().to_owned());
    probe.log(format!("{name} sees {group:?}"));
    probe.started.notify_one();
    probe.release.notified().await;
    probe.log(format!("{name} done"));
    1
}

trait Reaper {
    async fn reap(&self) -> u64;
    fn lease_group(&self) -> Option<String>;
}

struct Plain(Arc<Probe>);

impl Reaper for Plain {
    #[leader_only(group = "plain", default)]
    async fn reap(&self) -> u64 {
        hold(&self.0, "plain").await
    }

    #[leader_only(group = "plain", default = Some("not leading".into()))]
    fn lease_group(&self) -> Option<String> {
        current_lease().map(|lease| lease.group().to_owned())
    }
}

#[async_trait]
trait Job {
    async fn run(&self) -> u64;
}

struct Boxed(Arc<Probe>);

#[async_trait]
impl Job for Boxed {
    #[leader_only(group = "boxed", default)]
    async fn run(&self) -> u64 {
        hold(&self.0, "boxed").await
    }
}

// `Option<T>` wrapped by the attribute is not the user's `Option<Option<T>>`.
#[deny(clippy::option_option)]
#[leader_only(group = "plain")]
fn maybe() -> Option<u32> {
    Some(1)
}

/// `call` (a body that holds until released) runs on `leader`, which leads
/// `group` alone; a follower's call returns the default without running the
/// body; a `step_down` meanwhile waits for the leader's body to finish.
async fn step_down_waits_for_the_body<F>(
    group: &'static str,
    probe: &Arc<Probe>,
    call: impl Fn() -> F,
) where
    F: Future<Output = u64> + Send + 'static,
{
    let mem = MemoryBackend::new();
    let (leader, follower) = (instance(&mem, "a"), instance(&mem, "b"));
    let run = tokio::spawn(leader.scope(call()));
    probe.started.notified().await;
    assert!(leader.is_leader(group));
    assert_eq!(follower.scope(call()).await, 0, "the follower's default");

    let (stepping, log) = (leader.clone(), probe.clone());
    let step = tokio::spawn(async move {
        stepping.step_down(group).await.unwrap();
        log.log("stepped down".into());
    });
    // Time passes (less than the view has left): the step-down still waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!step.is_finished(), "step_down waits for the body");
    probe.release.notify_one();
    step.await.unwrap();
    assert_eq!(run.await.unwrap(), 1);
    assert_eq!(
        probe.take(),
        [
            format!("{group} sees Some({group:?})"),
            format!("{group} done"),
            "stepped down".to_owned(),
        ]
    );
    leader.shutdown().await;
    follower.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_async_fn_in_a_trait_impl_with_default_is_gated_for_its_whole_run() {
    let probe = Arc::new(Probe::default());
    step_down_waits_for_the_body("plain", &probe, || {
        let probe = probe.clone();
        async move { Plain(probe).reap().await }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_async_trait_impl_method_with_default_is_gated_for_its_whole_run() {
    let probe = Arc::new(Probe::default());
    step_down_waits_for_the_body("boxed", &probe, || {
        let probe = probe.clone();
        async move { Boxed(probe).run().await }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_sync_trait_method_with_default_sees_its_lease() {
    let mem = MemoryBackend::new();
    let (leader, follower) = (instance(&mem, "a"), instance(&mem, "b"));
    let plain = Plain(Arc::new(Probe::default()));
    // The group's first round: an async call waits for it.
    assert!(leader.run_if_leader("plain", || async {}).await.is_some());
    let seen = leader.scope(async { plain.lease_group() }).await;
    assert_eq!(seen.as_deref(), Some("plain"));
    assert!(follower.run_if_leader("plain", || async {}).await.is_none());
    let seen = follower.scope(async { plain.lease_group() }).await;
    assert_eq!(seen.as_deref(), Some("not leading"));
    assert_eq!(leader.scope(async { maybe() }).await, Some(Some(1)));
    leader.shutdown().await;
    follower.shutdown().await;
}
