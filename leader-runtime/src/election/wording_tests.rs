//! What the safe start says: a group's first election is normal (INFO); a
//! record this instance saw before and Redis no longer has is a data loss
//! (WARN).

use std::time::Duration;

use crate::test_support::{instance, next_transition, Captured, G, TTL};
use crate::{Event, MemoryBackend};

#[tokio::test(start_paused = true)]
async fn a_first_election_is_normal_and_a_lost_record_is_a_warning() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // A store that may have had data (as a Redis does): the first election
    // waits one ttl, and says that is normal.
    let mem = MemoryBackend::new();
    mem.flush();
    let a = instance(&mem, "a");
    let mut events = a.subscribe();
    a.ready_for([G], Duration::from_secs(1)).await.unwrap();
    assert!(matches!(
        next_transition(&mut events).await,
        Event::Elected { .. }
    ));
    assert_eq!(
        captured
            .lines("INFO", "Redis has no record of this group")
            .len(),
        1
    );
    assert_eq!(captured.lines("WARN", "lost its data").len(), 0);
    assert_eq!(captured.lines("ERROR", "").len(), 0);

    // The record vanishes under a leader that saw it: a data loss.
    mem.flush();
    assert!(matches!(
        next_transition(&mut events).await,
        Event::Lost { .. }
    ));
    tokio::time::sleep(TTL * 2).await;
    assert!(a.is_leader(G));
    assert_eq!(captured.lines("WARN", "Redis lost its data").len(), 1);
    assert_eq!(
        captured
            .lines("INFO", "Redis has no record of this group")
            .len(),
        1
    );
}
