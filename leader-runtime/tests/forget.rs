//! A forgotten group behind a `#[leader_only]` call site: the site cached
//! the old group handle, and must look the group up again rather than say
//! "not the leader" for ever.

use leader_runtime::{leader_only, Config, MemoryBackend, Runtime};

#[leader_only(group = "tenant-7")]
async fn job() -> u32 {
    7
}

#[leader_only(group = "tenant-7")]
fn sync_job() -> u32 {
    8
}

#[tokio::test(start_paused = true)]
async fn a_call_site_finds_its_group_again_after_it_was_forgotten() {
    let rt = Runtime::new(
        Config::builder()
            .memory(MemoryBackend::new())
            .instance_id("a")
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(rt.scope(job()).await, Some(7));
    assert_eq!(rt.scope(async { sync_job() }).await, Some(8));
    rt.forget("tenant-7").await.unwrap();
    assert!(rt.status().is_empty());
    // The site's cached handle is the forgotten group: it registers anew.
    assert_eq!(rt.scope(job()).await, Some(7));
    assert_eq!(rt.status().len(), 1);
    assert_eq!(rt.scope(async { sync_job() }).await, Some(8));
    rt.shutdown().await;
}
