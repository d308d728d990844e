//! Group names, key prefixes and the key layout in the backend.

use crate::{Error, Result};

/// Longest group name, in bytes.
pub(crate) const MAX_GROUP_LEN: usize = 128;

/// Check that `group` is a short printable identifier: `[A-Za-z0-9._:-]{1,128}`.
///
/// The macro checks literals at compile time with the same rule.
pub(crate) fn validate_group(group: &str) -> Result<()> {
    match name_rule(group) {
        Some(rule) => Err(Error::InvalidGroup {
            group: group.to_owned(),
            rule,
        }),
        None => Ok(()),
    }
}

/// Check a key prefix: same alphabet as group names (so keys stay printable and
/// the `{group}` hash tag is the only brace pair in a key).
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    match name_rule(prefix) {
        Some(rule) => Err(Error::Config {
            field: "key_prefix",
            rule: rule.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The rule `name` breaks, if any: `[A-Za-z0-9._:-]{1,128}`.
fn name_rule(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("must not be empty")
    } else if name.len() > MAX_GROUP_LEN {
        Some("must be at most 128 bytes")
    } else if !name.bytes().all(is_name_byte) {
        Some("may contain only ASCII letters, digits and `.`, `_`, `:`, `-`")
    } else {
        None
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

/// The keys of one group; all share the hash slot of `{group}`.
#[derive(Debug, Clone)]
pub(crate) struct GroupKeys {
    /// Holds the leader's instance id, with the lease's TTL.
    pub(crate) lease: String,
    /// The group's record (no TTL): the last fencing token issued, and until
    /// when earlier holders may still lead (see `backend/scripts/record.lua`). The
    /// key keeps the name it had when it held the token alone, so an
    /// instance of an older version fails on it (WRONGTYPE) instead of
    /// issuing tokens beside it.
    pub(crate) record: String,
    /// Present while the group is paused fleet-wide (a hash, no expiry:
    /// `by`, `at` in unix ms, `reason`): no instance acquires, and a leader's
    /// renew fails so it hands over (see `backend/scripts/record.lua`).
    pub(crate) paused: String,
}

impl GroupKeys {
    pub(crate) fn new(prefix: &str, group: &str) -> Self {
        Self {
            lease: format!("{prefix}:{{{group}}}:lease"),
            record: format!("{prefix}:{{{group}}}:token"),
            paused: format!("{prefix}:{{{group}}}:paused"),
        }
    }
}

/// The names under a group (`{prefix}:{group}:<name>`) the runtime keeps for
/// itself: the lease, the record, the pause key, a run-once result, the
/// heir of a crashed leader's lease (`backend/heir.rs`), the server marker
/// of a hash slot on a cluster (`backend/marker.rs`); and the
/// prefixes of the cron keys (`cron:<job>`, `cron-history:<job>`). A fenced
/// write to one of them is refused (see [`reserved_key`]).
pub(crate) const RESERVED_NAMES: [&str; 6] =
    ["lease", "token", "paused", "result", "heir", "server"];
/// See [`RESERVED_NAMES`].
pub(crate) const RESERVED_PREFIXES: [&str; 2] = ["cron:", "cron-history:"];

/// Whether `key` is one the runtime keeps for a group under `prefix`
/// (`{prefix}:{<any group>}:<reserved name>`), or the balance's membership
/// (`{prefix}:balance`, and `{prefix}:members` of releases before it), or
/// the server marker (`{prefix}:server`): user code writing it would pause
/// a group, corrupt its record, the server's epoch or the balance, or break
/// `leader status`.
pub(crate) fn reserved_key(prefix: &str, key: &str) -> bool {
    // And the fleet's membership (balanced leadership), the server marker.
    if key == members_key(prefix) || key == legacy_members_key(prefix) || key == server_key(prefix)
    {
        return true;
    }
    let Some(rest) = key
        .strip_prefix(prefix)
        .and_then(|k| k.strip_prefix(":{"))
        .and_then(|k| k.split_once("}:"))
        .map(|(_, name)| name)
    else {
        return false;
    };
    RESERVED_NAMES.contains(&rest) || RESERVED_PREFIXES.iter().any(|p| rest.starts_with(p))
}

/// The server marker under `prefix` on a server that is not a cluster (see
/// `backend/scripts/record.lua`; on a cluster, one per hash slot: `backend/marker.rs`).
pub(crate) fn server_key(prefix: &str) -> String {
    format!("{prefix}:server")
}

/// The pub/sub channel on which releases of every group under `prefix` are announced.
pub(crate) fn release_channel(prefix: &str) -> String {
    format!("{prefix}:released")
}

/// The hash of live instances and their counts, for balanced leadership:
/// under the prefix like every key of the runtime, so the documented ACL
/// key pattern (`~leader:*`) covers it.
pub(crate) fn members_key(prefix: &str) -> String {
    format!("{prefix}:balance")
}

/// The sorted set of live instances that releases before `{prefix}:balance`
/// kept (ids only): still reserved, as it may linger after an upgrade.
fn legacy_members_key(prefix: &str) -> String {
    format!("{prefix}:members")
}

/// A release notice's payload: `"<group> <instance id>"` (group names have no spaces).
pub(crate) fn parse_notice(payload: &str) -> Option<(&str, &str)> {
    payload.split_once(' ')
}

/// The pub/sub channel on which operators' requests to every group under
/// `prefix` are published (see [`ControlRequest`]).
pub(crate) fn control_channel(prefix: &str) -> String {
    format!("{prefix}:control")
}

/// An operator's request, published on the control channel as
/// `"<verb> <group>"`, or `"step-down <group> <token> <holder>"` (the token
/// before the holder: instance ids may contain spaces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ControlRequest {
    /// The group was paused: its leader renews now, sees the pause, and hands over.
    Pause,
    /// The pause ended: followers try to acquire now.
    Resume,
    /// The holder named hands over (drains, then releases) the leadership
    /// of that token, and that one alone: a request that arrives late, after
    /// the holder lost and won again, is not for the new leadership.
    StepDown {
        /// The fencing token of the leadership to end.
        token: u64,
        /// The instance asked (the holder when the request was made).
        holder: String,
    },
}

impl ControlRequest {
    /// The payload asking this of `group`.
    pub(crate) fn message(&self, group: &str) -> String {
        match self {
            ControlRequest::Pause => format!("pause {group}"),
            ControlRequest::Resume => format!("resume {group}"),
            ControlRequest::StepDown { token, holder } => {
                format!("step-down {group} {token} {holder}")
            }
        }
    }

    /// A payload as [`ControlRequest::message`] wrote it: the request and its group.
    pub(crate) fn parse(payload: &str) -> Option<(ControlRequest, &str)> {
        let (verb, rest) = payload.split_once(' ')?;
        match verb {
            "pause" => Some((ControlRequest::Pause, rest)),
            "resume" => Some((ControlRequest::Resume, rest)),
            "step-down" => {
                let (group, rest) = rest.split_once(' ')?;
                let (token, holder) = rest.split_once(' ')?;
                let token = token.parse().ok()?;
                let holder = holder.to_owned();
                Some((ControlRequest::StepDown { token, holder }, group))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_identifiers() {
        for ok in ["a", "cleanup", "v1.2_x:y-z", &"x".repeat(128)] {
            assert!(validate_group(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_bad_names() {
        for bad in [
            "",
            &"x".repeat(129),
            "a{b",
            "a}b",
            "a b",
            "a\nb",
            "grüße",
            "a\u{0}",
        ] {
            let err = validate_group(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidGroup { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = GroupKeys::new("leader", "cleanup");
        assert_eq!(keys.lease, "leader:{cleanup}:lease");
        assert_eq!(keys.record, "leader:{cleanup}:token");
        assert_eq!(keys.paused, "leader:{cleanup}:paused");
        #[cfg(feature = "cron")]
        {
            let job = crate::backend::cron::JobKeys::new("leader", "cleanup", "purge");
            assert_eq!(job.job, "leader:{cleanup}:cron:purge");
            assert_eq!(job.history, "leader:{cleanup}:cron-history:purge");
        }
    }

    #[test]
    fn the_runtimes_keys_are_reserved() {
        let keys = GroupKeys::new("leader", "jobs");
        let once = crate::backend::once::OnceKeys::new("leader", "jobs");
        for key in [&keys.lease, &keys.record, &keys.paused, &once.result] {
            assert!(reserved_key("leader", key), "{key}");
        }
        for key in [
            "leader:{jobs}:cron:purge",
            "leader:{jobs}:cron-history:purge",
            "leader:members",
            "leader:balance",
        ] {
            assert!(reserved_key("leader", key), "{key}");
        }
        for key in [
            "leader:{jobs}:state",
            "leader:{jobs}:leases",
            "leader:{jobs}:cron",
            "other:{jobs}:lease",
            "leader:jobs:lease",
            "{jobs}:lease",
            "other:members",
            "other:balance",
            "leader:{jobs}:members",
            "leader:{jobs}:balance",
        ] {
            assert!(!reserved_key("leader", key), "{key}");
        }
    }

    #[test]
    fn notice_payload_splits_at_first_space() {
        assert_eq!(parse_notice("g host:1 x"), Some(("g", "host:1 x")));
        assert_eq!(parse_notice("nospace"), None);
    }

    #[test]
    fn control_messages_round_trip() {
        let step_down = ControlRequest::StepDown {
            token: 17,
            holder: "host:1 x".into(),
        };
        assert_eq!(step_down.message("g"), "step-down g 17 host:1 x");
        for req in [ControlRequest::Pause, ControlRequest::Resume, step_down] {
            let msg = req.message("jobs");
            assert_eq!(
                ControlRequest::parse(&msg),
                Some((req.clone(), "jobs")),
                "{msg}"
            );
        }
        assert_eq!(
            ControlRequest::message(&ControlRequest::Pause, "g"),
            "pause g"
        );
        for bad in [
            "",
            "pause",
            "halt g",
            "step-down g",
            "step-down g a",
            "step-down g x a",
        ] {
            assert_eq!(ControlRequest::parse(bad), None, "{bad:?}");
        }
    }
}
