//! The exported metrics, read back through `metrics-util`'s debugging
//! recorder (installed once for the whole test binary; each test filters on
//! its own group label).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use tokio::time::sleep;

use super::names;
use crate::test_support::{builder, start};
use crate::{MemoryBackend, Runtime};

/// Snapshots reset what they read: one metrics test at a time.
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test binary");
        snapshotter
    })
}

/// One metric of `group`: (kind, name, sorted labels other than `group`).
pub(crate) type Key = (MetricKind, String, Vec<(String, String)>);

/// The metrics of `group` (snapshots are destructive: take one per test).
pub(crate) fn metrics_of(group: &str) -> HashMap<Key, DebugValue> {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            let mut of_group = false;
            let mut labels = Vec::new();
            for label in key.labels() {
                if label.key() == "group" {
                    of_group = label.value() == group;
                } else {
                    labels.push((label.key().to_owned(), label.value().to_owned()));
                }
            }
            labels.sort();
            of_group.then(|| ((kind, key.name().to_owned(), labels), value))
        })
        .collect()
}

fn instance(mem: &MemoryBackend, id: &str) -> Runtime {
    start(builder(mem, id))
}

pub(crate) fn counter(m: &HashMap<Key, DebugValue>, name: &str, labels: &[(&str, &str)]) -> u64 {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match m.get(&(MetricKind::Counter, name.to_owned(), labels)) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn every_transition_is_exported_with_its_labels() {
    let _serial = SERIAL.lock().await;
    snapshotter();
    let group = "metrics-transitions";
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(group, || async {}).await.is_some());
    assert!(b.run_if_leader(group, || async {}).await.is_none());
    // Two renewals on a.
    sleep(Duration::from_millis(2500)).await;
    // a hands over to b; b loses to an overwrite; a takes over again later.
    a.step_down(group).await.unwrap();
    sleep(Duration::from_millis(10)).await;
    assert!(b.is_leader(group));
    mem.overwrite("leader", group, "intruder", Duration::from_secs(2));
    sleep(Duration::from_secs(4)).await;
    assert!(a.is_leader(group) || b.is_leader(group));
    let leaders = u64::from(a.is_leader(group)) + u64::from(b.is_leader(group));
    a.shutdown().await;
    b.shutdown().await;

    let m = metrics_of(group);
    let (sa, sb) = (a.stats(group).unwrap(), b.stats(group).unwrap());
    assert_eq!(counter(&m, names::ELECTED, &[]), sa.elected + sb.elected);
    assert!(sa.elected + sb.elected >= 3, "{sa:?} {sb:?}");
    for (reason, n) in [
        ("stepped_down", sa.lost_stepped_down + sb.lost_stepped_down),
        ("superseded", sa.lost_superseded + sb.lost_superseded),
        ("expired", sa.lost_expired + sb.lost_expired),
        ("shutdown", sa.lost_shutdown + sb.lost_shutdown),
    ] {
        assert_eq!(
            counter(&m, names::LOST, &[("reason", reason)]),
            n,
            "{reason}"
        );
    }
    assert_eq!(counter(&m, names::LOST, &[("reason", "stepped_down")]), 1);
    assert_eq!(counter(&m, names::LOST, &[("reason", "superseded")]), 1);
    assert_eq!(counter(&m, names::LOST, &[("reason", "shutdown")]), leaders);
    assert_eq!(
        counter(&m, names::ACQUIRE_ATTEMPTS, &[]),
        sa.acquire_attempts + sb.acquire_attempts
    );
    // Both instances wrote the one gauge series of the group; the last write
    // was a loss (the shutdown).
    assert_eq!(
        m.get(&(MetricKind::Gauge, names::IS_LEADER.to_owned(), vec![])),
        Some(&DebugValue::Gauge(0.0.into()))
    );
    let Some(DebugValue::Histogram(renews)) = m.get(&(
        MetricKind::Histogram,
        names::RENEW_SECONDS.to_owned(),
        vec![],
    )) else {
        panic!("no renew histogram: {m:?}")
    };
    // Every renew call, including the one that found the intruder.
    assert_eq!(renews.len() as u64, sa.renewals + sb.renewals + 1);
    assert!(renews.len() >= 2);
    assert!(renews.iter().all(|s| s.0 >= 0.0 && s.0 < 1.0), "{renews:?}");
}

#[tokio::test(start_paused = true)]
async fn the_gauge_follows_leadership() {
    let _serial = SERIAL.lock().await;
    snapshotter();
    let group = "metrics-gauge";
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(group, || async {}).await.is_some());
    let m = metrics_of(group);
    assert_eq!(
        m.get(&(MetricKind::Gauge, names::IS_LEADER.to_owned(), vec![])),
        Some(&DebugValue::Gauge(1.0.into()))
    );
    assert_eq!(counter(&m, names::ELECTED, &[]), 1);
    assert_eq!(counter(&m, names::ACQUIRE_ATTEMPTS, &[]), 1);
    a.shutdown().await;
}

/// A follower exports the gauge from its first round, not only after a
/// loss: a dashboard sums `leader_is_leader` per group and alerts on 0 or
/// more than 1, and an instance that never led must count as 0, not as
/// missing. (The group is paused, so nobody in this process leads it and
/// sets the shared gauge to 1.)
#[tokio::test(start_paused = true)]
async fn a_follower_exports_the_gauge_as_0_from_the_start() {
    let _serial = SERIAL.lock().await;
    snapshotter();
    let group = "metrics-follower-gauge";
    let mem = MemoryBackend::new();
    let admin = crate::admin::Admin::new(&builder(&mem, "admin").build().unwrap()).unwrap();
    assert!(admin.pause(group, "test", None).await.unwrap());
    let b = instance(&mem, "b");
    assert!(b.run_if_leader(group, || async {}).await.is_none());
    let m = metrics_of(group);
    assert_eq!(
        m.get(&(MetricKind::Gauge, names::IS_LEADER.to_owned(), vec![])),
        Some(&DebugValue::Gauge(0.0.into())),
        "{m:?}"
    );
    b.shutdown().await;
}
