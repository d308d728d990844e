//! Where a lease script finds the server marker (see `record.lua`): the
//! key that names the server's current epoch, declared last in every
//! script that vouches for records.
//!
//! On a single server (and behind Sentinel) one marker serves every group,
//! so a group never named before may lead after one round trip once the
//! marker is older than a ttl. On a cluster a script may touch only keys of
//! its own hash slot, so each slot has its own, named with a tag that hashes
//! to that slot.

use std::sync::LazyLock;

use super::slot;
use crate::names::server_key;

/// The server marker for the group whose record key is `record`
/// (`{prefix}:{group}:token`); `cluster`: in the record's hash slot.
pub(crate) fn marker_key(record: &str, cluster: bool) -> String {
    let prefix = record.rfind(":{").map_or(record, |i| &record[..i]);
    let plain = server_key(prefix);
    let record_slot = slot(record.as_bytes());
    if !cluster || slot(plain.as_bytes()) == record_slot {
        return plain;
    }
    match SLOT_TAGS.get(usize::from(record_slot)) {
        Some(&tag) if tag != NONE => format!("{prefix}:{{{tag}}}:server"),
        // Not reached (every slot has a tag): the plain key, refused by the
        // cluster as of another slot, so the call fails closed.
        _ => plain,
    }
}

/// No tag found (see [`SLOT_TAGS`]).
const NONE: u32 = u32::MAX;

/// For each hash slot, the smallest number whose decimal form hashes to it:
/// a tag that puts a key in that slot.
static SLOT_TAGS: LazyLock<Vec<u32>> = LazyLock::new(|| {
    let mut tags = vec![NONE; 16384];
    let mut left = tags.len();
    // Every slot is reached well before this bound (within a few hundred
    // thousand numbers); the bound only keeps the loop finite.
    for n in 0..10_000_000u32 {
        let entry = &mut tags[usize::from(slot(n.to_string().as_bytes()))];
        if *entry == NONE {
            *entry = n;
            left -= 1;
            if left == 0 {
                break;
            }
        }
    }
    tags
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_server_has_one_marker_under_the_prefix() {
        assert_eq!(marker_key("leader:{jobs}:token", false), "leader:server");
        assert_eq!(marker_key("app:x:{a.b}:token", false), "app:x:server");
    }

    #[test]
    fn on_a_cluster_the_marker_shares_the_records_slot() {
        for group in ["jobs", "a", "cleanup", "once:x", "g-12345"] {
            let record = format!("leader:{{{group}}}:token");
            let marker = marker_key(&record, true);
            assert_eq!(slot(marker.as_bytes()), slot(record.as_bytes()), "{marker}");
            assert!(marker.starts_with("leader:{") && marker.ends_with("}:server"));
        }
    }

    #[test]
    fn every_slot_has_a_tag() {
        assert!(SLOT_TAGS.iter().all(|&t| t != NONE));
    }
}
