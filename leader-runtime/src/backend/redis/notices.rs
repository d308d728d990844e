//! The notice subscription: the pub/sub connection on the release and
//! control channels, kept up (moving on between servers or seed nodes), and
//! its health as the elections read it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::{ErrorKind, ServerErrorKind, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reply::{connection_err, timeout_err};
use crate::backend::sentinel::SentinelConn;
use crate::backend::{ChannelNotice, Channels, NoticeSink};
use crate::{Error, Result};

/// Where the release-notice subscription connects.
#[derive(Clone)]
pub(super) enum NoticeSource {
    /// The server, or each seed node of a cluster, used in turn, moving on
    /// when one fails.
    Nodes(Arc<[redis::Client]>),
    /// The master the sentinels name, resolved again for every connection.
    Sentinel(SentinelConn),
}

impl NoticeSource {
    /// The client for attempt number `n`.
    pub(super) async fn client(&self, n: usize, timeout: Duration) -> Result<redis::Client> {
        match self {
            NoticeSource::Nodes(nodes) => nodes
                .get(n % nodes.len().max(1))
                .cloned()
                .ok_or_else(|| backend_message("no Redis node to subscribe on")),
            NoticeSource::Sentinel(sentinel) => {
                match tokio::time::timeout(timeout, sentinel.resolve()).await {
                    Ok(client) => client.map_err(|e| connection_err(&e)),
                    Err(_) => Err(timeout_err(timeout)),
                }
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            NoticeSource::Nodes(nodes) => nodes.len(),
            NoticeSource::Sentinel(_) => 1,
        }
    }

    /// What to name in a log line when no node could be chosen.
    pub(super) fn describe(&self) -> String {
        match self {
            NoticeSource::Nodes(_) => "?".to_owned(),
            NoticeSource::Sentinel(s) => format!("master {:?} via sentinels", s.master_name()),
        }
    }
}

/// The notice connection's health check: a `PING` every `every`, answered
/// within `deadline`, or the connection counts as lost (a half-open
/// connection otherwise looks healthy, and followers would wait for notices
/// that never come).
#[derive(Clone, Copy)]
pub(super) struct Health {
    pub(super) every: Duration,
    pub(super) deadline: Duration,
}

/// Subscribe and forward notices until the connection ends, fails its
/// health check, or `stop`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn listen(
    client: &redis::Client,
    channel: &Channels,
    sink: &NoticeSink,
    up: &AtomicBool,
    timeout: Duration,
    health: Health,
    stop: &CancellationToken,
    reconnect: bool,
) -> Result<()> {
    let err = |e: redis::RedisError| connection_err(&e);
    let mut pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
        .await
        .map_err(|_| timeout_err(timeout))?
        .map_err(err)?;
    tokio::time::timeout(timeout, pubsub.subscribe(&channel.release))
        .await
        .map_err(|_| timeout_err(timeout))?
        .map_err(err)?;
    // Operators' requests. An ACL user written for an earlier version may
    // not reach this channel: releases still work, a pause still takes
    // effect at the leader's next renewal; only the quick path is lost.
    match tokio::time::timeout(timeout, pubsub.subscribe(&channel.control)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {
            tracing::warn!(
                channel = channel.control,
                error = %e,
                "cannot subscribe to control requests (allow the channel to the ACL user): \
                 step-down requests are not received, and pauses take effect at the next renewal"
            );
        }
        Ok(Err(e)) => return Err(err(e)),
        Err(_) => return Err(timeout_err(timeout)),
    }
    up.store(true, Ordering::SeqCst);
    tracing::debug!(
        ?channel,
        "listening for release notices and control requests"
    );
    if reconnect {
        // Redis may have restarted empty meanwhile: leaders renew now,
        // instead of up to one renew interval later.
        sink(ChannelNotice::Released {
            group: crate::backend::EVERY_GROUP,
            by: "",
        });
    }
    let (mut commands, mut messages) = pubsub.split();
    let mut next_ping = Instant::now() + health.every;
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            msg = messages.next() => msg,
            _ = tokio::time::sleep_until(next_ping) => {
                // Messages that arrive meanwhile wait in the stream's buffer.
                match tokio::time::timeout(health.deadline, commands.ping::<Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(err(e)),
                    Err(_) => {
                        return Err(backend_message(&format!(
                            "release-notice connection did not answer PING within {:?}",
                            health.deadline
                        )))
                    }
                }
                next_ping = Instant::now() + health.every;
                continue;
            }
        };
        let Some(msg) = msg else {
            return Err(backend_message("release-notice connection closed"));
        };
        let payload: String = match msg.get_payload() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a release notice that is not a string");
                continue;
            }
        };
        match channel.parse(msg.get_channel_name(), &payload) {
            Some(notice) => sink(notice),
            None => tracing::warn!(payload, "ignoring a malformed notice"),
        }
    }
}

/// A connection-level error with no underlying error (the notice connection).
pub(super) fn backend_message(message: &str) -> Error {
    Error::Connection {
        message: message.to_owned(),
        source: None,
    }
}
