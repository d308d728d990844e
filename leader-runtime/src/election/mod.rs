//! The election of one group: a task that campaigns as a follower, renews as
//! leader, hands over on request, and campaigns again after any loss.

pub(crate) mod balance;
pub(crate) mod ctx;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use crate::backend::{self, Acquire, Expiry, Op, Renew, SafeStart};
use crate::election::balance::{hold_for, take_back_after, Balance, SHARE_GRACE, VAIN_HAND_OVERS};
use crate::election::ctx::{Callback, Ctx};
use crate::group::lease::{Lease, Tenure};
use crate::group::{Command, Group, GroupKind, MailboxRx};
use crate::names::GroupKeys;
use crate::observe::events::{Event, LostReason};
use crate::observe::metrics;
use crate::{Error, Result};

/// The acquisition that starts a leadership.
struct Won {
    token: u64,
    /// When the acquire was sent: the view lasts one ttl from then.
    sent: Instant,
    /// When the view may begin (safe start), if not at once: the wait the
    /// server asked for, counted from when its reply *arrived*, so a slow
    /// reply cannot shorten it.
    ready_at: Option<Instant>,
    why: SafeStart,
    /// This election had seen the group's record before (a holder, or a
    /// leadership of its own): a record missing now was lost, not new.
    record_known: bool,
}

/// Balanced: a take-back pending after a hand-over for the balance.
#[derive(Clone, Copy)]
struct TakeBack {
    /// Keep the group once taken back (see `Balance::try_shed`).
    keep: bool,
    /// The token of the leadership handed over: still the record's last
    /// token when the take-back wins if nobody held the group since.
    released: u64,
}

/// Whether the election goes on after a leadership ended.
enum Flow {
    Campaign,
    Stop,
}

/// Run `group`'s election until the runtime stops or the group is
/// forgotten. `predecessor`: the group of the same name forgotten before
/// this one was registered, its election perhaps still handing over.
pub(crate) async fn run(
    group: Arc<Group>,
    ctx: Arc<Ctx>,
    commands: MailboxRx,
    predecessor: Option<Arc<Group>>,
) {
    // Also when the task is dropped (its tokio runtime shut down, or it
    // panicked): a successor waiting for it must not wait for ever.
    let ttl = ctx.config.ttl;
    let _ended = EndsElection(group.clone(), ttl);
    metrics::following(&group.name);
    let keys = GroupKeys::new(&ctx.config.key_prefix, &group.name);
    // A run-once body's lease is outside the balance: never handed over.
    let balance = (ctx.balance.clone()).filter(|_| group.kind == GroupKind::User);
    let mut election = Election {
        group,
        ctx,
        keys,
        commands,
        failing: false,
        cooldown_until: None,
        noticed: false,
        shed: false,
        record_known: false,
        balance,
        counted: false,
        taking_back: None,
        kept: None,
        vain: (0, 0),
        claim_after: None,
    };
    let span = tracing::info_span!("election", group = %election.group.name, instance = %election.ctx.config.instance_id);
    let run = async {
        if let Some(predecessor) = predecessor {
            if !election.succeed(&predecessor).await {
                return;
            }
        }
        election.run().await;
    };
    tracing::Instrument::instrument(run, span).await;
    // A body still in flight (a hand-over whose drain ran out and left the
    // lease to expire, or a view that ended under it): a successor sits out
    // a ttl, past the lease's expiry.
    let mut claim_after = election.claim_after;
    if !election.group.runs.quiesce() {
        claim_after = claim_after.max(Some(Instant::now() + ttl));
    }
    election.group.control.mark_ended(claim_after);
}

/// Marks the group's election ended when dropped (if `run` did not): in a
/// panic, a view may still be open and the lease ours, so a successor sits
/// out a ttl (the view ends by itself by then).
struct EndsElection(Arc<Group>, Duration);

impl Drop for EndsElection {
    fn drop(&mut self) {
        let claim_after = std::thread::panicking().then(|| Instant::now() + self.1);
        self.0.control.mark_ended(claim_after);
    }
}

struct Election {
    group: Arc<Group>,
    ctx: Arc<Ctx>,
    keys: GroupKeys,
    commands: MailboxRx,
    /// In a burst of backend failures (log only its first).
    failing: bool,
    /// After a step-down: stay out of the race until then (or a release notice).
    cooldown_until: Option<Instant>,
    /// The last wait ended with a release notice.
    noticed: bool,
    /// The leadership that just ended was handed over for the balance.
    shed: bool,
    /// An acquire has found the group's record (see [`Won::record_known`]).
    record_known: bool,
    /// Balanced leadership, unless off or this is a `once:` group.
    balance: Option<Arc<Balance>>,
    /// Balanced: this group counts as campaigned in (it is eligible).
    counted: bool,
    /// Balanced: after a hand-over for the balance, the first attempt after
    /// the take-back cooldown that gets an answer takes the group back if
    /// nobody below its share took it. Spent by a win, dropped when an
    /// attempt finds the group held, when a release notice comes (another
    /// instance held the group) or when the group leaves the race: a later
    /// win is no take-back. Kept through a failed (or paused) attempt: one that timed
    /// out may have won on the server, and a win after it uncounted would
    /// let every round hand the group over again, each costing a take-back
    /// window, unbounded by `VAIN_HAND_OVERS`.
    taking_back: Option<TakeBack>,
    /// Balanced: taken back at this layout epoch; not handed over again
    /// while the fleet's layout (the members below their share and their
    /// campaign counts) stays the same.
    kept: Option<u64>,
    /// Balanced: at this layout epoch, handed over in vain this many times.
    vain: (u64, u32),
    /// Not before then may this instance claim the group (a forgotten
    /// predecessor's body may still run: see [`Self::succeed`]); passed on
    /// to a successor of ours.
    claim_after: Option<Instant>,
}

impl Election {
    async fn run(&mut self) {
        let balance = self.balance.clone();
        loop {
            let Some(won) = self.follow().await else {
                self.group.control.mark_first_round();
                break;
            };
            if let Some(b) = &balance {
                b.won();
            }
            let holding = self.ctx.backend.holding();
            let flow = self.lead(won).await;
            drop(holding);
            if let Some(b) = &balance {
                b.ended(std::mem::take(&mut self.shed));
            }
            if let Flow::Stop = flow {
                break;
            }
        }
        self.count_campaign(false);
    }

    /// Wait for the election of a group of this name forgotten before ours
    /// was registered (its hand-over drains a body still running), so that
    /// this instance never leads the group twice at once: our acquire would
    /// re-claim its lease at once. Not leader meanwhile. A body of it still
    /// in flight when it ended (its drain ran out and left the lease to
    /// expire) keeps us out of the race for a `ttl` more (`claim_after`,
    /// which `follow` waits out before any attempt). Returns false when the
    /// runtime stops or our group was forgotten too (having waited all the
    /// same, so that our own successor waits for both).
    async fn succeed(&mut self, predecessor: &Group) -> bool {
        // A `forget` of ours is answered once the predecessor has ended, so
        // that when it returns nothing of the group's runs here.
        let mut forgotten = Vec::new();
        let claim_after = match predecessor.control.has_ended() {
            Some(claim_after) => claim_after,
            None => {
                tracing::debug!(
                    "named again while its forgotten leadership hands over: waiting for it"
                );
                self.group.control.mark_first_round();
                let ended = predecessor.control.ended();
                tokio::pin!(ended);
                loop {
                    tokio::select! {
                        biased;
                        _ = self.ctx.stop.cancelled() => break None,
                        claim_after = &mut ended => break claim_after,
                        // Not leader: nothing to hand over.
                        cmd = self.commands.recv() => match cmd {
                            Command::StepDown(reply) | Command::SetEligible(_, reply) => { let _ = reply.send(Ok(())); }
                            Command::Forget(reply) => forgotten.push(reply),
                        },
                    }
                }
            }
        };
        self.claim_after = claim_after.filter(|&at| at > Instant::now());
        self.group.control.set_predecessor(None);
        let stop = !forgotten.is_empty() || self.ctx.stop.is_cancelled();
        for reply in forgotten {
            let _ = reply.send(Ok(()));
        }
        if stop {
            return false;
        }
        if let Some(at) = self.claim_after {
            tracing::warn!(
                wait_ms = at.saturating_duration_since(Instant::now()).as_millis() as u64,
                "a body of the forgotten leadership may still run: out of the race until its lease has expired"
            );
        }
        true
    }

    /// Balanced: count this group as campaigned in (`yes`) or not.
    fn count_campaign(&mut self, yes: bool) {
        if let Some(b) = &self.balance {
            if std::mem::replace(&mut self.counted, yes) != yes {
                b.campaigning(yes);
            }
        }
    }

    fn op(&self) -> Op<'_> {
        Op {
            group: &self.group.name,
            keys: &self.keys,
            id: &self.ctx.config.instance_id,
        }
    }

    /// A backend call bounded by `limit`. The call's future is boxed at
    /// once: it lives for one round trip, and inline it would be among the
    /// largest states of every election task, idle or not (its size is the
    /// task's for good: ~650 bytes per group).
    fn call<'a, T: 'a>(
        &'a self,
        limit: Duration,
        fut: impl Future<Output = Result<T>> + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        backend::within(&self.group.name, limit, Box::pin(fut))
    }

    /// Campaign until we win (`Some`) or the runtime stops (`None`).
    async fn follow(&mut self) -> Option<Won> {
        let retry = self.ctx.config.retry_interval;
        // The next attempt is a close one (`Due::close`): its wait ended at
        // its time, not with a notice or a request.
        let mut next_close = false;
        loop {
            // Taken here: a sit-out or a cooldown below moves the attempt
            // off its due time.
            let close = std::mem::take(&mut next_close);
            if let Some(at) = self.claim_after {
                // A forgotten predecessor's body may still run: nothing ends
                // this wait early (not a release notice, not a return to
                // the race), and the group is not one this instance could
                // take meanwhile.
                if Instant::now() < at {
                    self.count_campaign(false);
                    // Not leader meanwhile: callers need not wait for a round.
                    self.group.control.mark_first_round();
                    if !self.wait(at, false).await {
                        return None;
                    }
                    self.noticed = false;
                    continue;
                }
                self.claim_after = None;
            }
            // Out of the race, a group is not one this instance could take.
            self.count_campaign(self.group.control.eligible());
            if !self.group.control.eligible() {
                self.taking_back = None;
                self.group.control.mark_first_round();
                if !self.sit_out().await {
                    return None;
                }
                continue;
            }
            if let Some(until) = self.cooldown_until.take() {
                tracing::debug!("stepped down: out of the race until the cooldown ends or another instance releases");
                // Operators' requests (a resume, a repeated step-down) do not
                // end it: the instance would win again at once.
                if !self.wait(until, false).await {
                    return None;
                }
                if self.noticed {
                    if self.taking_back.take().is_some() {
                        tracing::debug!("another instance took the group handed over for the balance and released it: campaigning as usual");
                    }
                } else if Instant::now() < until {
                    // A `set_eligible` ended the wait early: the loop
                    // checks the eligibility, the cooldown goes on (else
                    // the next attempt would come at once, and a take-back
                    // before its window). Leaving the race ends it.
                    self.cooldown_until = Some(until);
                }
                continue;
            }
            if std::mem::take(&mut self.noticed)
                && self.balance.as_ref().is_some_and(|b| b.at_share())
            {
                // Balanced: at our share already, let an instance below its
                // share take the released lease first — unless a fresh
                // membership round says we are below ours now (a clean
                // leaver leaves before it releases).
                if !self.share_grace().await {
                    return None;
                }
                self.noticed = false;
            }
            let sent = Instant::now();
            self.group.counters.acquire_attempt();
            metrics::acquire_attempt(&self.group.name);
            let ttl = self.ctx.config.ttl;
            // Batched with the attempts of this runtime's other groups due
            // at the same instant (one script call per hash slot).
            let result = self
                .call(
                    self.ctx.config.call_timeout,
                    self.ctx.attempts.acquire(
                        &self.group.name,
                        &self.keys,
                        &self.ctx.config.instance_id,
                        ttl,
                        close,
                    ),
                )
                .await;
            let received = Instant::now();
            // A held lease's pttl counts from when the script ran: after
            // the call went out (`asked`), before its answer came.
            let (result, asked) = match result {
                Ok((answer, asked)) => (Ok(answer), asked),
                Err(e) => (Err(e), sent),
            };
            let next = match result {
                Ok(Acquire::Won {
                    token,
                    wait,
                    why,
                    last,
                }) => {
                    self.recovered();
                    self.saw_paused(false);
                    self.group
                        .observed
                        .saw_holder(Some(&self.ctx.config.instance_id));
                    let ready_at = (!wait.is_zero()).then(|| received + wait);
                    let record_known = std::mem::replace(&mut self.record_known, true);
                    if let Some(back) = self.taking_back.take() {
                        self.taken_back(back, why, last);
                    }
                    return Some(Won {
                        token,
                        sent,
                        ready_at,
                        why,
                        record_known,
                    });
                }
                Ok(Acquire::Held { holder, pttl }) => {
                    self.recovered();
                    self.record_known = true;
                    self.saw_paused(false);
                    self.group.observed.saw_holder(Some(&holder));
                    tracing::trace!(%holder, ?pttl, "lease held by another instance");
                    // Somebody took the group handed over: no take-back.
                    self.taking_back = None;
                    let notices_up = self.ctx.notices_up.load(Ordering::SeqCst);
                    match pttl {
                        // Try again right when it expires; a release
                        // notice wakes us sooner.
                        Some(pttl) if notices_up || pttl <= retry => {
                            Expiry::lease(asked + pttl, received + pttl)
                        }
                        Some(_) | None => Expiry::at(received + retry),
                    }
                }
                Ok(Acquire::Paused) => {
                    self.recovered();
                    self.saw_paused(true);
                    // A resume request wakes us sooner.
                    Expiry::at(received + retry)
                }
                Err(e) => {
                    self.failed("acquire", &e);
                    Expiry::at(received + retry)
                }
            };
            // On the attempt grid: the groups due together go as one call.
            let due = self.ctx.attempts.follow_at(next);
            self.group.control.mark_first_round();
            if !self.wait(due.at, true).await {
                return None;
            }
            // Close only when the wait ended at its time: after a release
            // notice (several may come together, and a share grace may
            // follow) the attempt gathers with the quiet period.
            next_close = due.close && !self.noticed && Instant::now() >= due.at;
            if self.noticed {
                // Another instance held the group and released it.
                self.taking_back = None;
            }
        }
    }

    /// Follower wait: until `deadline`, a release notice, or (with
    /// `requests`) an operator's request. Answers commands meanwhile.
    /// Returns false when the runtime stops.
    async fn wait(&mut self, deadline: Instant, requests: bool) -> bool {
        loop {
            tokio::select! {
                biased;
                _ = self.ctx.stop.cancelled() => return false,
                cmd = self.commands.recv() => match cmd {
                    // Not leader: nothing to hand over.
                    Command::StepDown(reply) => { let _ = reply.send(Ok(())); }
                    Command::Forget(reply) => { let _ = reply.send(Ok(())); return false; }
                    // Re-enter the loop: it checks the new eligibility.
                    Command::SetEligible(_, reply) => { let _ = reply.send(Ok(())); return true; }
                },
                _ = self.group.control.released.notified() => {
                    self.noticed = true;
                    return true;
                }
                _ = self.group.control.requested.notified(), if requests => return true,
                _ = sleep_until(deadline) => return true,
            }
        }
    }

    /// Won back a group handed over for the balance (`back`), with the
    /// acquire's `why` and `last` (the token issued before ours). Counted
    /// in vain only if nobody held the lease since our release: the token
    /// before ours is still the one we released (any acquisition issues a
    /// new one; a holder that released cleanly leaves it, also when its
    /// release notice never reached us), and no earlier holder's time is
    /// left to wait out (one that took it and lost its key would leave
    /// one; so would a record that is gone or unvouched). Kept when
    /// `back.keep`, or after [`VAIN_HAND_OVERS`] in vain at this layout — a
    /// member that campaigns in every group but never takes one (wedged)
    /// costs each group that many take-back windows, not one per round.
    fn taken_back(&mut self, back: TakeBack, why: SafeStart, last: Option<u64>) {
        let Some(b) = &self.balance else {
            return;
        };
        let epoch = b.epoch();
        if why != SafeStart::No || last != Some(back.released) {
            tracing::info!(
                "took back the group handed over for the balance after another instance held it"
            );
            return;
        }
        let (at, n) = &mut self.vain;
        if *at != epoch {
            (*at, *n) = (epoch, 0);
        }
        *n += 1;
        #[cfg(test)]
        self.group.vain_take_backs.fetch_add(1, Ordering::Relaxed);
        if back.keep || *n >= VAIN_HAND_OVERS {
            self.kept = Some(epoch);
        }
        tracing::info!(
            kept = self.kept == Some(epoch),
            "nobody below its share took the group handed over for the balance: leading it again (kept: not handed over again while the members below their share and their groups stay the same)"
        );
    }

    /// The share grace: [`Self::wait`] for [`SHARE_GRACE`] — for
    /// [`hold_for`] while another member leads more than its share (the
    /// release may be a hand-over meant for a member below its share, or
    /// going back to its leader) — ended sooner by a membership round
    /// (asked for now) that puts this instance below its share.
    async fn share_grace(&mut self) -> bool {
        let Some(b) = self.balance.clone() else {
            return true;
        };
        let start = Instant::now();
        let hold = start + hold_for(self.ctx.config.call_timeout);
        let mut deadline = if b.others_over() {
            hold
        } else {
            start + SHARE_GRACE
        };
        let mut ask = true;
        loop {
            // Created before the ask: a round that comes at once still wakes it.
            let round = b.round.notified();
            if std::mem::take(&mut ask) {
                b.ask_round();
            }
            tokio::select! {
                biased;
                go_on = self.wait(deadline, false) => return go_on,
                _ = round => {
                    if !b.at_share() {
                        return true;
                    }
                    if b.others_over() {
                        deadline = hold;
                    }
                }
            }
        }
    }

    /// Out of the race (not eligible): no acquire attempts until eligible
    /// again. Answers commands meanwhile. Returns false when the runtime stops.
    async fn sit_out(&mut self) -> bool {
        tracing::info!("not eligible: out of the race until set_eligible(true)");
        loop {
            if self.group.control.eligible() {
                tracing::info!("eligible again: campaigning");
                // Re-entering the race ends a step-down cooldown too.
                self.cooldown_until = None;
                // A release notice that came while out of the race is stale:
                // the acquire that follows reads the lease anyway.
                let _ =
                    futures_util::FutureExt::now_or_never(self.group.control.released.notified());
                return true;
            }
            tokio::select! {
                biased;
                _ = self.ctx.stop.cancelled() => return false,
                cmd = self.commands.recv() => match cmd {
                    Command::StepDown(reply) | Command::SetEligible(_, reply) => {
                        let _ = reply.send(Ok(()));
                    }
                    Command::Forget(reply) => {
                        let _ = reply.send(Ok(()));
                        return false;
                    }
                },
            }
        }
    }

    /// Hold the lease until it is lost, handed over, or the runtime stops.
    async fn lead(&mut self, won: Won) -> Flow {
        let control = &self.group.control;
        control.leading_token.store(won.token, Ordering::SeqCst);
        // A step-down request for this leadership may have come before it
        // began (between the acquire's reply and now): take it at once.
        if control.step_down_token.load(Ordering::SeqCst) == won.token {
            control.requested.notify_one();
        }
        let flow = self.leading(won).await;
        self.group.control.leading_token.store(0, Ordering::SeqCst);
        flow
    }

    async fn leading(&mut self, won: Won) -> Flow {
        let cfg = &self.ctx.config;
        let (ttl, margin, renew_every) = (cfg.ttl, cfg.drift_margin, cfg.renew_interval);
        let call_timeout = cfg.call_timeout;
        let quick_retry =
            (renew_every / 10).clamp(Duration::from_millis(5), Duration::from_millis(200));
        let mut valid_until = won.sent + ttl - margin;
        let mut next_renew =
            self.ctx
                .backend
                .renew_at(won.sent + renew_every, renew_every, &self.group.name);
        // Safe start: an earlier holder may still believe it leads.
        let mut ready_at = won.ready_at;
        let mut tenure = None;
        match (ready_at, won.why) {
            (None, _) => tenure = Some(self.begin(won.token, won.why, valid_until)),
            (Some(ready), SafeStart::First) if won.record_known => tracing::warn!(
                token = won.token,
                wait = ?ready.saturating_duration_since(Instant::now()),
                "acquired; the group's record is gone from Redis although this instance saw it before: Redis lost its data (a restart without persistence, a flush, a failover to an empty replica), so leading after one ttl"
            ),
            (Some(ready), SafeStart::First | SafeStart::No) => tracing::info!(
                token = won.token,
                wait = ?ready.saturating_duration_since(Instant::now()),
                "acquired; Redis has no record of this group, and cannot vouch that it lost none within the last ttl (the fleet's first use of this server, or a flush, a restart, a failover or an eviction since): leading after what is left of one ttl (safe start)"
            ),
            (Some(ready), SafeStart::Unvouched) => tracing::warn!(
                token = won.token,
                wait = ?ready.saturating_duration_since(Instant::now()),
                "acquired; the group's record was written by another Redis process (a restart from disk, a failover or a restore), so leading after one ttl"
            ),
            (Some(ready), SafeStart::Early) => tracing::warn!(
                token = won.token,
                wait = ?ready.saturating_duration_since(Instant::now()),
                "acquired; the lease key vanished before the last holder's time (eviction or a manual DEL), so leading once that time has passed"
            ),
        }
        self.group.control.mark_first_round();
        loop {
            let mut wake = next_renew.min(valid_until);
            if let Some(ready) = ready_at {
                wake = wake.min(ready);
            }
            tokio::select! {
                biased;
                _ = self.ctx.stop.cancelled() => {
                    let _ = self.hand_over(won.token, tenure, valid_until, LostReason::Shutdown).await;
                    return Flow::Stop;
                }
                cmd = self.commands.recv() => match cmd {
                    Command::StepDown(reply) => {
                        let result = self.hand_over(won.token, tenure, valid_until, LostReason::SteppedDown).await;
                        self.cool_down(ttl);
                        let _ = reply.send(result);
                        return Flow::Campaign;
                    }
                    Command::SetEligible(true, reply) => { let _ = reply.send(Ok(())); }
                    Command::SetEligible(false, reply) => {
                        // Out of the race: hand over like a step-down, then sit out.
                        let result = self.hand_over(won.token, tenure, valid_until, LostReason::SteppedDown).await;
                        let _ = reply.send(result);
                        return Flow::Campaign;
                    }
                    Command::Forget(reply) => {
                        let result = self.hand_over(won.token, tenure, valid_until, LostReason::SteppedDown).await;
                        let _ = reply.send(result);
                        return Flow::Stop;
                    }
                },
                _ = self.group.control.released.notified() => {
                    // The backend reconnected (Redis may have restarted
                    // empty), or a stray release notice: renew now. Early
                    // is always safe.
                    next_renew = Instant::now();
                }
                _ = self.group.control.requested.notified() => {
                    let asked = self.group.control.step_down_token.compare_exchange(
                        won.token, 0, Ordering::SeqCst, Ordering::SeqCst);
                    if asked.is_ok() {
                        tracing::info!(token = won.token, "an operator asked this instance to hand over");
                        let _ = self.ctx.events.send(Event::StepDownRequested {
                            group: self.group.name.to_string(),
                            token: won.token,
                        });
                        let _ = self.hand_over(won.token, tenure, valid_until, LostReason::SteppedDown).await;
                        self.cool_down(ttl);
                        return Flow::Campaign;
                    }
                    // A pause request: renew now, which finds the pause.
                    next_renew = Instant::now();
                }
                // Balanced: a new membership round; over our share, hand
                // over (see `Self::try_shed`).
                _ = balance_round(self.balance.as_deref()) => {
                    if let Some(keep) = self.try_shed() {
                        return self.shed(won.token, tenure, valid_until, keep).await;
                    }
                }
                _ = sleep_until(wake) => {}
            }
            let now = Instant::now();
            if now >= valid_until {
                self.end(
                    tenure,
                    LostReason::Expired,
                    "lease not renewed before the view ended",
                );
                return Flow::Campaign;
            }
            if let Some(ready) = ready_at {
                if now >= ready {
                    ready_at = None;
                    tenure = Some(self.begin(won.token, won.why, valid_until));
                }
            }
            if now < next_renew {
                continue;
            }
            let sent = now;
            let limit = (valid_until - now).min(call_timeout);
            let started = std::time::Instant::now();
            let result = self
                .call(limit, self.ctx.backend.renew(&self.op(), won.token, ttl))
                .await;
            metrics::renew_round_trip(&self.group.name, started.elapsed());
            match result {
                Ok(Renew::Renewed) => {
                    self.recovered();
                    valid_until = sent + ttl - margin;
                    next_renew = self.ctx.backend.renew_at(
                        sent + renew_every,
                        renew_every,
                        &self.group.name,
                    );
                    self.group.counters.renewed();
                    tracing::trace!(elapsed = ?started.elapsed(), "renewed");
                    if let Some(t) = &tenure {
                        self.group.extend(t, valid_until);
                        let _ = self.ctx.events.send(Event::Renewed {
                            group: self.group.name.to_string(),
                            token: t.token(),
                            valid_until,
                        });
                    }
                }
                Ok(Renew::Gone) => {
                    self.end(tenure, LostReason::Expired, "lease is gone from the server");
                    return Flow::Campaign;
                }
                Ok(Renew::Unvouched) => {
                    self.end(
                        tenure,
                        LostReason::Expired,
                        "the lease record was written by another Redis process (a restart from disk, a failover or a restore); acquiring again with a safe start",
                    );
                    return Flow::Campaign;
                }
                Ok(Renew::Paused) => {
                    self.recovered();
                    self.saw_paused(true);
                    // The lease was not extended: hand over within what the
                    // view has left, as a step-down does.
                    let _ = self
                        .hand_over(won.token, tenure, valid_until, LostReason::SteppedDown)
                        .await;
                    return Flow::Campaign;
                }
                Ok(Renew::Other) => {
                    self.end(
                        tenure,
                        LostReason::Superseded,
                        "another holder has the lease",
                    );
                    return Flow::Campaign;
                }
                Err(e) => {
                    self.group.counters.renew_failed();
                    self.failed("renew", &e);
                    next_renew = Instant::now() + quick_retry;
                }
            }
        }
    }

    /// Balanced, on a membership round: whether to hand this group over
    /// now (`Some`, with `Balance::try_shed`'s answer) — over our share,
    /// not a group taken back at this layout, and not one running a gated
    /// body: the drain would wait for it, and one that outlasts the view
    /// leaves the group leaderless for up to a ttl, for a move nobody
    /// needed. `busy` is only a hint (a body that just started on another
    /// thread may not show), so the answer is made exact by stopping
    /// admission (`Runs::quiesce`): a body in flight then reopens it, and
    /// the group is kept until a later round. On `Some`, admission stays
    /// stopped and nothing runs: the drain that follows is immediate.
    fn try_shed(&self) -> Option<bool> {
        let b = self.balance.as_ref()?;
        if self.kept == Some(b.epoch()) || self.group.runs.busy() {
            return None;
        }
        let keep = b.try_shed()?;
        if !self.group.runs.quiesce() {
            b.unshed();
            tracing::debug!(
                "a gated body is in flight: not handing this group over for the balance this round"
            );
            return None;
        }
        Some(keep)
    }

    /// Hand over for the balance, as a step-down does (drain, end the view,
    /// release), then stay out of the race only until the take-back: if
    /// nobody below its share took the group by then, campaign for it again
    /// (or until a release notice); `keep`: keep it then (see
    /// `Balance::try_shed`).
    async fn shed(
        &mut self,
        token: u64,
        tenure: Option<Arc<Tenure>>,
        valid_until: Instant,
        keep: bool,
    ) -> Flow {
        tracing::info!("leading more than this instance's share while another leads less than its own: handing over");
        self.shed = true;
        let (drained, _) =
            Box::pin(self.drain_and_release(token, tenure, valid_until, LostReason::SteppedDown))
                .await;
        if let Some(b) = &self.balance {
            // Publish the lower count soon: until then the others count the
            // group twice once its taker has published (shares too large).
            b.ask_round();
        }
        // Drained, nothing of the old leadership runs here: taking the
        // group back is as safe as any acquire. Not drained, the lease was
        // left to expire: out for one ttl, as after a step-down.
        let cfg = &self.ctx.config;
        let out_for = if drained {
            take_back_after(cfg.call_timeout)
        } else {
            cfg.ttl
        };
        self.taking_back = drained.then_some(TakeBack {
            keep,
            released: token,
        });
        self.cool_down(out_for);
        Flow::Campaign
    }

    /// After a step-down: out of the race for `span` (one ttl; after a
    /// hand-over for the balance, until the take-back), or until another
    /// instance releases.
    fn cool_down(&mut self, span: Duration) {
        self.cooldown_until = Some(Instant::now() + span);
        // A wake-up stored while we led (a reconnect notice not yet taken)
        // must not cut the cooldown short; a request stored then is spent.
        let _ = futures_util::FutureExt::now_or_never(self.group.control.released.notified());
        let _ = futures_util::FutureExt::now_or_never(self.group.control.requested.notified());
    }

    /// Record whether the backend says the group is paused; log and send an
    /// event when that changed.
    fn saw_paused(&self, paused: bool) {
        if !self.group.observed.saw_paused(paused) {
            return;
        }
        let group = self.group.name.to_string();
        let event = if paused {
            tracing::info!("group paused fleet-wide: not acquiring until resumed");
            Event::Paused { group }
        } else {
            tracing::info!("group resumed: campaigning");
            Event::Resumed { group }
        };
        let _ = self.ctx.events.send(event);
    }

    /// Publish a new leadership.
    fn begin(&self, token: u64, why: SafeStart, valid_until: Instant) -> Arc<Tenure> {
        let tenure = Arc::new(
            Tenure::new(
                self.group.name.clone(),
                token,
                self.group.view.base,
                valid_until,
            )
            .after_loss(matches!(why, SafeStart::First | SafeStart::Unvouched)),
        );
        self.group.begin(tenure.clone());
        self.group.counters.elected();
        metrics::elected(&self.group.name);
        tracing::info!(token, "elected");
        let lease = Lease {
            tenure: tenure.clone(),
        };
        let _ = self.ctx.events.send(Event::Elected {
            group: self.group.name.to_string(),
            instance_id: self.ctx.config.instance_id.clone(),
            token,
            valid_until,
        });
        let _ = self
            .ctx
            .callbacks
            .send(Callback::Elected(self.group.name.clone(), lease));
        tenure
    }

    /// End the view (if we ever published one) and tell everyone once.
    fn end(&self, tenure: Option<Arc<Tenure>>, reason: LostReason, why: &str) {
        self.group.end();
        self.group.observed.saw_holder(None);
        let Some(tenure) = tenure else {
            tracing::debug!(
                why,
                "lease ended before the view was published (safe start)"
            );
            return;
        };
        tenure.end();
        self.group.counters.lost(reason);
        metrics::lost(&self.group.name, reason);
        match reason {
            LostReason::Expired | LostReason::Superseded => {
                tracing::warn!(token = tenure.token(), %reason, why, "lost leadership")
            }
            LostReason::SteppedDown | LostReason::Shutdown => {
                tracing::info!(token = tenure.token(), %reason, "stepped down")
            }
        }
        let _ = self.ctx.events.send(Event::Lost {
            group: self.group.name.to_string(),
            instance_id: self.ctx.config.instance_id.clone(),
            token: tenure.token(),
            reason,
        });
        let _ = self
            .ctx
            .callbacks
            .send(Callback::Lost(self.group.name.clone(), reason));
    }

    /// Drain gated runs, end the view, then release the lease — so the next
    /// leader never starts while a body here still runs. Boxed, like
    /// [`Self::call`]: it runs once per leadership at most, and inline it would
    /// be the largest state of every election task (~800 bytes per group).
    fn hand_over(
        &mut self,
        token: u64,
        tenure: Option<Arc<Tenure>>,
        valid_until: Instant,
        reason: LostReason,
    ) -> Pin<Box<impl Future<Output = Result<()>> + '_>> {
        Box::pin(async move {
            let (_, released) = self
                .drain_and_release(token, tenure, valid_until, reason)
                .await;
            released
        })
    }

    /// [`Self::hand_over`]; also says whether every gated run finished
    /// (`false`: the lease was left to expire).
    async fn drain_and_release(
        &mut self,
        token: u64,
        tenure: Option<Arc<Tenure>>,
        valid_until: Instant,
        reason: LostReason,
    ) -> (bool, Result<()>) {
        if !self.group.runs.drain(valid_until).await {
            // Safety before liveness: a release would let the next leader
            // start while a body here may still run. The lease expires
            // instead, within what is left of its ttl.
            tracing::warn!("gated runs still in flight when the view ended: not releasing the lease; it expires within its ttl");
            self.end(tenure, reason, "handing over");
            return (false, Ok(()));
        }
        self.end(tenure, reason, "handing over");
        if let (LostReason::Shutdown, Some(b)) = (reason, &self.ctx.balance) {
            // Balanced: leave the membership first, so the others' next
            // round (which a release notice asks for) counts without us.
            b.until_left(self.ctx.config.call_timeout).await;
        }
        let result = self
            .call(
                self.ctx.config.call_timeout,
                self.ctx
                    .backend
                    .release(&self.op(), &self.ctx.release_channel, token),
            )
            .await;
        match result {
            Ok(released) => {
                tracing::debug!(released, "released lease");
                (true, Ok(()))
            }
            Err(e) => {
                // The lease expires by itself within one ttl.
                self.failed("release", &e);
                (true, Err(e))
            }
        }
    }

    /// Log the first failure of a burst; the rest at debug level, and a
    /// WARN with their count once a minute for the whole runtime.
    fn failed(&mut self, op: &str, e: &Error) {
        self.group.observed.failed(e);
        self.ctx.outage.failed(&self.group.name, op, e);
        if self.failing {
            tracing::debug!(op, error = %e, "backend call failed again");
            return;
        }
        self.failing = true;
        tracing::error!(op, error = %e, "backend call failed; retrying (repeats log at debug level, and a WARN counts them every minute)");
        let _ = self.ctx.events.send(Event::BackendError {
            group: self.group.name.to_string(),
            message: e.to_string(),
        });
    }

    fn recovered(&mut self) {
        self.group.observed.ok();
        if std::mem::take(&mut self.failing) {
            tracing::info!("backend reachable again");
        }
    }
}

/// The next membership round of a balanced election (never, unbalanced).
async fn balance_round(balance: Option<&Balance>) {
    match balance {
        Some(b) => b.round.notified().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod eligibility_tests;

#[cfg(test)]
mod partial_loss_tests;

#[cfg(test)]
#[cfg(test)]
mod batch_tests;

#[cfg(test)]
mod balance_tests;

#[cfg(test)]
mod balance_liveness_tests;

#[cfg(test)]
mod balance_shed_tests;

#[cfg(test)]
mod wording_tests;

#[cfg(test)]
mod control_tests;
