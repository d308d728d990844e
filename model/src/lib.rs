//! A model of the `leader` lease protocol, checked with [stateright].
//!
//! See `model/README.md` for what is modelled, what is abstracted away, and how to run the
//! checks. In short: a few client instances, one Redis server (lease key with expiry, the
//! record `{token, until, run}`, the server's `run_id`), the lease scripts as atomic server
//! steps, a leader's fenced writes and cron claims, requests and replies that are delayed,
//! reordered or lost, client crashes and pauses, a discrete global clock, and the server
//! faults of issues 10 and 40 (lease-key loss, whole-data loss, restore of an older state /
//! failover to a lagging replica; for the server-marker design also fail-back, evictions,
//! `FLUSHALL`, replid changes, `CONFIG RESETSTAT`). Safety properties checked in every
//! reachable state:
//!
//! * [`NO_OVERLAP`]: at no time do two clients' views (`is_leader()` true) overlap;
//! * [`TOKENS_GROW`]: every token the server issues is strictly greater than every earlier one;
//! * [`TOKEN_CURRENT`]: a leader's token is the record's, or was superseded less than a ttl
//!   before its view ends;
//! * [`NO_STALE_WRITE`]: no fenced write applies after one with a greater token;
//! * [`TICK_ONCE`]: no cron tick is run by two leaderships.
//!
//! The protocol is chosen with [`Protocol`]: [`Protocol::V1`] (the scripts before v2),
//! [`Protocol::V2_AS_WRITTEN`] (the v2 rule as first drafted; the draft is gone, the model keeps it) and [`Protocol::V2_FIXED`]
//! (that rule with the holes this model found closed, see [`Fixes`]).

use std::fmt::Write as _;

use stateright::{Model, Path, Property};

/// Name of the "no two views overlap" property.
pub const NO_OVERLAP: &str = "no two views overlap";
/// Name of the "tokens strictly grow" property.
pub const TOKENS_GROW: &str = "tokens strictly grow";
/// Name of the "a leader's token is the record's" property: while the record is there and
/// vouched for, an active view's token is the record's token, or was superseded less than
/// a ttl before the view ends (see the README for why no stronger form holds).
pub const TOKEN_CURRENT: &str = "a leader's token is the record's, or superseded under a ttl ago";
/// Name of the "no stale write applies" property: no fenced write applies after one with a
/// greater token applied.
pub const NO_STALE_WRITE: &str = "no stale fenced write applies";
/// Name of the "no tick claimed twice" property: the cron tick is claimed by one leadership
/// (token) at most.
pub const TICK_ONCE: &str = "no cron tick claimed by two leaderships";
/// The time of the one cron tick the claims are about.
pub const CRON_TICK: u8 = 1;
/// Name of the sanity property "some client's view is active at some point".
pub const SOME_VIEW: &str = "some view is active (sanity)";
/// Name of the sanity property "some fenced write applies".
pub const SOME_WRITE: &str = "some fenced write applies (sanity)";
/// Name of the sanity property "the cron tick is run".
pub const SOME_TICK: &str = "the cron tick is run (sanity)";
/// Name of the sanity property "a group with no record leads at once" (the point of the
/// server marker).
pub const SOME_PROMPT_START: &str = "a group with no record leads without a wait (sanity)";
/// Name of the sanity property "some view begins only after a wait".
pub const SOME_WAITED_VIEW: &str = "some view begins after a wait (sanity)";

/// Microseconds per tick: the server's `TIME` in µs, as the token rule uses it.
pub const US_PER_TICK: u64 = 1000;

/// Which scripts (and client rule) the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// The scripts before v2: the record is a token string; a missing record means a wait of one
    /// ttl, measured from when the acquire was *sent*; nothing else waits.
    V1,
    /// The v2 rule as first drafted (record `{token, until, run}`; wait `ttl` when the
    /// record is missing or not vouched for, else `until - now`; the view begins at
    /// `reply_received + wait`), with or without each of the [`Fixes`] this model found
    /// necessary. [`Protocol::V2_AS_WRITTEN`] has none, [`Protocol::V2_FIXED`] all.
    V2(Fixes),
}

impl Protocol {
    /// The v2 draft exactly as written.
    pub const V2_AS_WRITTEN: Protocol = Protocol::V2(Fixes::NONE);
    /// The v2 draft with every fix of [`Fixes`].
    pub const V2_FIXED: Protocol = Protocol::V2(Fixes::ALL);

    /// The fixes this protocol has.
    pub fn fixes(self) -> Fixes {
        match self {
            Protocol::V1 => Fixes::NONE,
            Protocol::V2(f) => f,
        }
    }
}

/// Changes to the v2 draft's rule; without each one the model finds two
/// overlapping views (see the README for the traces).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fixes {
    /// The record also keeps `floor`: the server time before which the current holder's
    /// view may not begin (`now + wait` of the acquire that granted the lease). A re-claim
    /// (`holder == id`) waits `max(0, floor - now)` instead of 0 and keeps `floor`.
    /// As written, a client whose acquire reply (with a wait) is lost and that retries is
    /// told "re-claim, wait 0" and leads at once.
    pub reclaim_waits_for_floor: bool,
    /// A clean release sets `until = max(now, floor)` instead of `now`. As written, a
    /// holder released during its safe-start wait (a shutdown in a rolling deploy) erases
    /// the earlier holder's `until`, and the next acquirer leads at once.
    pub release_keeps_floor: bool,
    /// A renew succeeds only while the record is vouched for (`run == run_id`); otherwise it
    /// writes nothing and answers 0 ("gone"), and the holder must acquire again (a full-ttl
    /// safe start). As written, after a restore or failover that brought back our lease key
    /// but not a later holder's grant, our renew succeeds, extends our view into the later
    /// holder's, and even vouches for the stale record.
    pub renew_needs_vouched_record: bool,
    /// A release names the leadership it ends: `release(id, token)` deletes the lease only
    /// if `record.token == token`. As written (`release(id)`), a release delayed past the
    /// same instance's next acquire (`step_down` then re-acquire; a release stuck on an old
    /// connection) deletes the *new* lease, and with it sets `until = now`: the next
    /// acquirer leads at once while this instance still does.
    pub release_names_token: bool,
    /// A renewal names the leadership it extends: `renew(id, token)` answers -1
    /// ("superseded") and writes nothing unless `record.token == token` (after the checks
    /// that the lease is ours and the record vouched for). Without it, an instance's late
    /// acquire on an old connection re-creates its own lost lease key under a new token (or
    /// re-claims its lease, replacing its token), and an old renewal extends that newer
    /// grant: the instance leads past the start of a later holder's view, and its fenced
    /// writes are refused for the rest of its view.
    pub renew_names_token: bool,
    /// A fenced write applies only while the record is vouched for (`record.run` is this
    /// server's): after a restore or failover the record's token is an older one, and a
    /// write from a leader succeeded before the copy was taken would pass the high-water
    /// mark (issue 40, item 3).
    pub fence_needs_vouched_record: bool,
    /// The server marker of issue 40, item 10 (a design, not in the scripts yet): a key
    /// `M = {run_id, replid, epoch, since, evicted}` checked at the start of every script;
    /// records are vouched for by the epoch, and a group with no record waits only
    /// `max(0, M.since + ttl - now)`. See [`Marker`].
    pub server_marker: bool,
    /// A change to the marker design (with [`Fixes::server_marker`]): `M` also lists the
    /// groups that have a record (every script of a group that finds its record adds the
    /// group), and a group with no record that `M` lists waits a full ttl (its record was
    /// lost); `evicted_keys` is not read.
    /// Closes the hole `CONFIG RESETSTAT` leaves in the counter (see the README).
    pub marker_lists_groups: bool,
}

impl Fixes {
    /// None: the v2 draft as written.
    pub const NONE: Fixes = Fixes {
        reclaim_waits_for_floor: false,
        release_keeps_floor: false,
        renew_needs_vouched_record: false,
        release_names_token: false,
        renew_names_token: false,
        fence_needs_vouched_record: false,
        server_marker: false,
        marker_lists_groups: false,
    };
    /// All of them but the [`Fixes::server_marker`] design (checked on its own).
    pub const ALL: Fixes = Fixes {
        reclaim_waits_for_floor: true,
        release_keeps_floor: true,
        renew_needs_vouched_record: true,
        release_names_token: true,
        renew_names_token: true,
        fence_needs_vouched_record: true,
        server_marker: false,
        marker_lists_groups: false,
    };
}

/// Which faults the environment may inject (each injection counts against
/// [`LeaseModel::max_faults`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Faults {
    /// The lease key alone is lost: eviction under a `volatile-*` policy, or a manual `DEL`.
    pub lease_loss: bool,
    /// All data is lost: restart with no persistence, `FLUSHALL`. New `run_id`.
    pub data_loss: bool,
    /// The data goes back to an earlier snapshot of it, served by a *new* process (`run_id`):
    /// restart from an RDB snapshot or an AOF missing its last second, failover to a lagging
    /// replica. The snapshot point is itself chosen nondeterministically.
    pub restore: bool,
    /// The data goes back to an earlier snapshot, served by the process that wrote that
    /// snapshot (same `run_id`): fail-back to a demoted primary that resynced from a lagging
    /// replica, `DEBUG RELOAD`, an operator `RESTORE`-ing dumped keys. Outside v2's stated
    /// fault model; off in the default checks.
    pub restore_same_run: bool,
    /// A client process dies (its view ends, its requests stay in flight) and starts again
    /// with the same instance id.
    pub crash: bool,
    /// `allkeys-*` eviction of the record or of the server marker (each bumps the server's
    /// `evicted_keys`; the lease key's eviction bumps it too under the marker design).
    pub evict_any: bool,
    /// `FLUSHALL` by the same process: all data gone, `run_id` and `replid` unchanged.
    pub flush: bool,
    /// A replica attaches to a master with no backlog, or the backlog is freed after the
    /// last replica left: a new `master_replid`, `master_replid2` zero, the same data.
    pub replid_shift: bool,
    /// `CONFIG RESETSTAT`: the `evicted_keys` counter goes back to 0.
    pub reset_stat: bool,
}

impl Faults {
    /// Every fault of issue 10 (lease-key loss, data loss, restore, client crash).
    pub const ISSUE_10: Faults = Faults {
        lease_loss: true,
        data_loss: true,
        restore: true,
        restore_same_run: false,
        crash: true,
        evict_any: false,
        flush: false,
        replid_shift: false,
        reset_stat: false,
    };
    /// Every fault the server-marker design is checked against: issue 10's, the fail-back
    /// ([`Faults::restore_same_run`], with a new `replid`), and the four above.
    pub const MARKER: Faults = Faults {
        lease_loss: true,
        data_loss: true,
        restore: true,
        restore_same_run: true,
        crash: false,
        evict_any: true,
        flush: true,
        replid_shift: true,
        reset_stat: true,
    };
    /// No fault at all.
    pub const NONE: Faults = Faults {
        lease_loss: false,
        data_loss: false,
        restore: false,
        restore_same_run: false,
        crash: false,
        evict_any: false,
        flush: false,
        replid_shift: false,
        reset_stat: false,
    };
}

/// The model's parameters. Times are in ticks of the global clock.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    /// Which protocol the clients and scripts follow.
    pub protocol: Protocol,
    /// Number of client instances (ids `0..clients`).
    pub clients: u8,
    /// Lease ttl.
    pub ttl: u8,
    /// Drift margin subtracted from a view's end. 0 is the strictest check (all clocks agree).
    pub margin: u8,
    /// The clock stops here.
    pub max_time: u8,
    /// Requests each client may send in a whole run (acquire, renew or release).
    pub max_sends: u8,
    /// Faults the environment may inject in a whole run.
    pub max_faults: u8,
    /// Which faults are enabled.
    pub faults: Faults,
    /// Fenced writes the clients may send in a whole run (all clients together).
    pub max_writes: u8,
    /// Cron claims (of [`CRON_TICK`]) the clients may send in a whole run (all together).
    pub max_claims: u8,
    /// The server runs each client's requests in the order sent (one connection per client;
    /// a request not run before a later one is lost). `false` lets any request overtake any
    /// other, as across a reconnect while the old connection still has requests queued.
    pub fifo: bool,
}

impl LeaseModel {
    /// The bounded configuration CI runs: 2 clients, ttl 2, clock up to 3, 3 requests
    /// each, 1 fault of any issue-10 kind, requests reordered freely.
    pub fn ci(protocol: Protocol) -> Self {
        LeaseModel {
            protocol,
            clients: 2,
            ttl: 2,
            margin: 0,
            max_time: 3,
            max_sends: 3,
            max_faults: 1,
            faults: Faults::ISSUE_10,
            max_writes: 0,
            max_claims: 0,
            fifo: false,
        }
    }

    /// The larger configuration of `LEADER_MODEL_FULL=1`: 4 requests each.
    pub fn full(protocol: Protocol) -> Self {
        LeaseModel {
            max_sends: 4,
            ..LeaseModel::ci(protocol)
        }
    }
}

/// The lease key: holder and absolute expiry (server time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// Holder's instance id.
    pub holder: u8,
    /// The key is gone once `now >= expiry`.
    pub expiry: u8,
}

/// The record key (no expiry). V1 uses only `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// Last token issued.
    pub token: u64,
    /// Server time until which the last holders may believe they lead (v2).
    pub until: u8,
    /// `run_id` of the process that wrote `until` (v2).
    pub run: u8,
    /// Server time before which the current holder's view may not begin (with [`Fixes`] only).
    pub floor: u8,
    /// The cron job claimed under this record (`claim.lua` sets a field named after the job
    /// key): a record without it was created since the job's last claim.
    pub job_mark: bool,
}

/// The cron job's key (`claim.lua`), reduced to the one tick [`CRON_TICK`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Job {
    /// `last >= CRON_TICK`: the tick was decided (claimed, or recorded as not run).
    pub decided: bool,
    /// The token of the tick's claim (0: none).
    pub claim: u64,
    /// Server time from which this process has every decision (`since`).
    pub since: u8,
    /// The token that may still claim ticks before `since` (0: none).
    pub since_token: u64,
    /// Which server (run, or epoch under the marker design) set `since`.
    pub run: u8,
}

/// The server marker of [`Fixes::server_marker`] (a key, lost and restored with the data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Marker {
    /// The `run_id` it was written under.
    pub run: u8,
    /// The `master_replid` it was last checked under.
    pub replid: u8,
    /// The data history records are vouched for by (`run_id/replid` when it was written).
    pub epoch: u8,
    /// Since when no key (record) may have gone missing unnoticed.
    pub since: u8,
    /// The server's `evicted_keys` when last checked.
    pub evicted: u8,
    /// The group had a record under this marker ([`Fixes::marker_lists_groups`]).
    pub group: bool,
}

/// The server's data (what a snapshot holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Data {
    /// The lease key.
    pub lease: Option<Lease>,
    /// The record key.
    pub record: Option<Record>,
    /// The cron job's key.
    pub job: Option<Job>,
    /// The server marker ([`Fixes::server_marker`]).
    pub marker: Option<Marker>,
}

/// A script call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// acquire(id, ttl)
    Acquire,
    /// renew(id, ttl)
    Renew,
    /// release(id, token)
    Release,
    /// A fenced write (`fence.lua`) with the leader's token.
    Write,
    /// A cron claim (`claim.lua`) of [`CRON_TICK`] with the leader's token.
    Claim,
}

impl Op {
    /// A fenced write or a claim: sent by a leader's body, not by the election.
    fn is_body(self) -> bool {
        matches!(self, Op::Write | Op::Claim)
    }
}

/// A request in flight: sent by `client` at `sent`, executed later or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// Sender.
    pub client: u8,
    /// The sender's sequence number of this request (its send order).
    pub seq: u8,
    /// The sender has given up on this request (sent another one, or restarted): its reply
    /// would be ignored, but the server may still run it.
    pub stale: bool,
    /// Which script.
    pub op: Op,
    /// Client (= global) time the request was sent.
    pub sent: u8,
    /// For a claim: the floor (`ARGV[7]`, the claimer's view start); `sent` is the restore
    /// floor (`ARGV[8]`, the claimer's clock).
    pub floor: u8,
    /// For a release, renew, write or claim: the token of the leadership it ends or extends (used with
    /// [`Fixes::release_names_token`] and [`Fixes::renew_names_token`]).
    pub token: u64,
}

/// A script's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// Acquired: the token and the wait before the view may begin (v1: `wait` is `ttl` when
    /// the record was missing, measured from the send time; else 0).
    Acquired {
        /// The fencing token.
        token: u64,
        /// Safe-start wait in ticks.
        wait: u8,
    },
    /// Someone else holds the lease.
    Held,
    /// Renew: 1 renewed, 0 gone (or, with the fixes, not vouched for), -1 someone else holds
    /// it or (with [`Fixes::renew_names_token`]) our token was superseded.
    Renewed(i8),
}

/// A reply in flight (only for the request its client still waits for; replies to a request
/// the client gave up on are discarded at once, as the client would ignore them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reply {
    /// The request answered.
    pub req: Request,
    /// The answer.
    pub answer: Answer,
}

/// A client's local view: `is_leader()` is true for `ready <= now < until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct View {
    /// First instant of the view.
    pub ready: u8,
    /// First instant after the view.
    pub until: u8,
}

/// One client instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Client {
    /// The client believes it holds the lease (it renews and may release).
    pub holder: bool,
    /// Requests sent so far.
    pub sends: u8,
    /// The token of its current leadership (0 if none).
    pub token: u64,
    /// Its view, if any.
    pub view: Option<View>,
}

impl Client {
    fn active(&self, now: u8) -> bool {
        self.view.is_some_and(|v| v.ready <= now && now < v.until)
    }
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Global clock (ticks); every client's and the server's clock.
    pub now: u8,
    /// The server's data.
    pub data: Data,
    /// The serving process's `run_id`.
    pub run: u8,
    /// Next fresh `run_id`.
    pub next_run: u8,
    /// A restart is under way: no script runs until the next tick (a restart or failover
    /// takes at least one tick, i.e. far more than the microsecond of the token clock).
    pub down: bool,
    /// A snapshot of the data (RDB file, AOF, a lagging replica's copy) and the `run_id` of
    /// the process that served it then.
    pub snapshot: Option<(Data, u8)>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Requests in flight (sorted).
    pub requests: Vec<Request>,
    /// Replies in flight (sorted).
    pub replies: Vec<Reply>,
    /// Faults injected so far.
    pub faults: u8,
    /// Ghost: the largest token issued so far.
    pub max_token: u64,
    /// Ghost: some token was issued that was not greater than an earlier one.
    pub token_regressed: bool,
    /// Ghost: some view began after a nonzero wait (for the sanity property).
    pub waited: bool,
    /// The server's `master_replid`.
    pub replid: u8,
    /// Whether the server's `master_replid2` is all zeros (no promotion since).
    pub replid2_zero: bool,
    /// The server's `evicted_keys` counter.
    pub evicted: u8,
    /// Scripts run in this tick so far, counted only with [`Faults::evict_any`]: the
    /// server's µs clock moves on between two scripts, so a record evicted between two
    /// grants in one tick does not give one token twice (restarts take a tick instead).
    pub scripts: u8,
    /// Fenced writes sent so far (all clients).
    pub writes: u8,
    /// Cron claims sent so far (all clients).
    pub claims: u8,
    /// Ghost: the greatest token of a fenced write applied to the resource (the resource is
    /// outside the server's faults: what was applied stays applied).
    pub applied_max: u64,
    /// Ghost: a fenced write applied after one with a greater token.
    pub stale_write: bool,
    /// Ghost: the token that claimed [`CRON_TICK`] (0: none yet).
    pub tick_token: u64,
    /// Ghost: a second leadership claimed it.
    pub tick_twice: bool,
    /// Ghost: some acquire found no record and answered "wait 0".
    pub prompt_start: bool,
}

/// A step of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The global clock advances one tick.
    Tick,
    /// A client sends a request (giving up on any earlier one it still waited for).
    Send(u8, Op),
    /// The server runs a request's script atomically.
    Exec(Request),
    /// A reply reaches its client.
    Deliver(Reply),
    /// The lease key is lost (eviction, `DEL`).
    LoseLease,
    /// All data is lost (restart empty).
    LoseAll,
    /// The current data is saved (RDB snapshot, the point a replica lags at).
    TakeSnapshot,
    /// The snapshot is served by a new process (restart from RDB/AOF, failover).
    Restore,
    /// The snapshot is served by the process that served it then (fail-back, `DEBUG RELOAD`).
    RestoreSameRun,
    /// A client crashes and restarts with the same id.
    Crash(u8),
    /// The record is evicted (`allkeys-*`): `evicted_keys` + 1.
    EvictRecord,
    /// The server marker is evicted (`allkeys-*`): `evicted_keys` + 1.
    EvictMarker,
    /// `FLUSHALL`: all data gone, same process.
    Flush,
    /// A new `master_replid` with `master_replid2` zero (replica attach / backlog freed).
    ReplidShift,
    /// `CONFIG RESETSTAT`: `evicted_keys` back to 0.
    ResetStat,
}

impl State {
    /// Client `i` gives up on every request it sent so far.
    fn give_up(&mut self, i: u8) {
        self.replies.retain(|r| r.req.client != i);
        for r in &mut self.requests {
            if r.client == i {
                r.stale = true;
            }
        }
        self.requests.sort();
    }
}

impl LeaseModel {
    fn lease_at(&self, data: &Data, now: u8) -> Option<Lease> {
        data.lease.filter(|l| now < l.expiry)
    }

    fn issue_token(&self, s: &mut State, last: Option<u64>) -> u64 {
        // Tick 0 is not the epoch: the record of a group led long ago has a smaller token.
        let now_us = u64::from(s.now + 1) * US_PER_TICK + u64::from(s.scripts);
        let token = match last {
            Some(last) => (last + 1).max(now_us),
            None => now_us,
        };
        if s.max_token != 0 && token <= s.max_token {
            s.token_regressed = true;
        }
        s.max_token = s.max_token.max(token);
        token
    }

    /// Runs one script atomically; returns the answer (None for release).
    fn exec(&self, s: &mut State, req: Request) -> Option<Answer> {
        let now = s.now;
        let ttl = self.ttl;
        let id = req.client;
        let lease = self.lease_at(&s.data, now);
        let fixes = self.protocol.fixes();
        // What a record must carry in `run` to be vouched for, and (marker design) since when
        // no record may have gone missing unnoticed.
        let (epoch, since) = if fixes.server_marker {
            let m = self.check_marker(s);
            // A group M lists had a record: none now means it was lost (a full ttl).
            (m.epoch, (!m.group).then_some(m.since))
        } else {
            (s.run, None)
        };
        let vouched = |r: &Record, epoch: u8| r.run == epoch;
        match req.op {
            Op::Acquire => {
                if let Some(l) = lease {
                    if l.holder != id {
                        return Some(Answer::Held);
                    }
                }
                let reclaim = lease.is_some();
                let rec = s.data.record;
                let token = self.issue_token(s, rec.map(|r| r.token));
                let (wait, record) = match self.protocol {
                    Protocol::V1 => {
                        let wait = if rec.is_none() { ttl } else { 0 };
                        (
                            wait,
                            Record {
                                token,
                                until: 0,
                                run: 0,
                                floor: 0,
                                job_mark: rec.is_some_and(|r| r.job_mark),
                            },
                        )
                    }
                    Protocol::V2(fixes) => {
                        let vouched_rec = rec.filter(|r| vouched(r, epoch));
                        let (wait, floor) = match vouched_rec {
                            // first election, or data loss; with the marker, only what is
                            // left of a ttl since a record may have gone missing
                            None if rec.is_none() => {
                                let wait = since.map_or(ttl, |t| (t + ttl).saturating_sub(now));
                                s.prompt_start |= wait == 0;
                                (wait, now + wait)
                            }
                            // restart from disk, failover, restore
                            None => (ttl, now + ttl),
                            // re-claim of our own lease
                            Some(r) if reclaim => {
                                if fixes.reclaim_waits_for_floor {
                                    (r.floor.saturating_sub(now), r.floor)
                                } else {
                                    (0, r.floor)
                                }
                            }
                            // lease key gone before its time (or a release, an expiry)
                            Some(r) => {
                                let wait = r.until.saturating_sub(now);
                                (wait, now + wait)
                            }
                        };
                        let until = vouched_rec.map_or(0, |r| r.until).max(now + ttl);
                        (
                            wait,
                            Record {
                                token,
                                until,
                                run: epoch,
                                floor,
                                // HSET leaves the record's other fields (the job's mark).
                                job_mark: rec.is_some_and(|r| r.job_mark),
                            },
                        )
                    }
                };
                s.data.record = Some(record);
                s.data.lease = Some(Lease {
                    holder: id,
                    expiry: now + ttl,
                });
                if fixes.marker_lists_groups {
                    if let Some(m) = s.data.marker.as_mut() {
                        m.group = true;
                    }
                }
                Some(Answer::Acquired { token, wait })
            }
            Op::Renew => Some(Answer::Renewed(match lease {
                Some(l) if l.holder == id => {
                    let rec = s.data.record;
                    match self.protocol {
                        Protocol::V1 => {}
                        Protocol::V2(fixes) => match rec {
                            Some(r)
                                if vouched(&r, epoch)
                                    && fixes.renew_names_token
                                    && r.token != req.token =>
                            {
                                return Some(Answer::Renewed(-1));
                            }
                            Some(mut r) if vouched(&r, epoch) => {
                                r.until = r.until.max(now + ttl);
                                s.data.record = Some(r);
                            }
                            _ if fixes.renew_needs_vouched_record => {
                                return Some(Answer::Renewed(0));
                            }
                            Some(mut r) => {
                                r.until = now + ttl;
                                r.run = epoch;
                                s.data.record = Some(r);
                            }
                            None => {}
                        },
                    }
                    s.data.lease = Some(Lease {
                        holder: id,
                        expiry: now + ttl,
                    });
                    1
                }
                Some(_) => -1,
                None => 0,
            })),
            Op::Release => {
                let ours = lease.is_some_and(|l| l.holder == id)
                    && (!self.protocol.fixes().release_names_token
                        || s.data.record.is_some_and(|r| r.token == req.token));
                if ours {
                    s.data.lease = None;
                    if let Some(mut r) = s.data.record {
                        if vouched(&r, epoch) {
                            match self.protocol {
                                Protocol::V1 => {}
                                Protocol::V2(fixes) if fixes.release_keeps_floor => {
                                    r.until = now.max(r.floor);
                                }
                                Protocol::V2(_) => r.until = now,
                            }
                            s.data.record = Some(r);
                        }
                    }
                }
                None
            }
            Op::Write => {
                // fence.lua: the record's token is the high-water mark.
                let applies = match s.data.record {
                    // no record: no token can be vouched for
                    None => false,
                    Some(r) if fixes.fence_needs_vouched_record && !vouched(&r, epoch) => false,
                    Some(r) if req.token < r.token => false,
                    Some(mut r) => {
                        // A token above the mark raises it (the next election issues more).
                        r.token = req.token;
                        s.data.record = Some(r);
                        true
                    }
                };
                if applies {
                    if req.token < s.applied_max {
                        s.stale_write = true;
                    }
                    s.applied_max = s.applied_max.max(req.token);
                }
                None
            }
            Op::Claim => {
                self.claim(s, req, epoch);
                None
            }
        }
    }

    /// `claim.lua` for the one tick [`CRON_TICK`], in mode 'run'.
    fn claim(&self, s: &mut State, req: Request, epoch: u8) {
        let ours = self
            .lease_at(&s.data, s.now)
            .is_some_and(|l| l.holder == req.client);
        let Some(mut rec) = s.data.record.filter(|r| ours && r.token == req.token) else {
            return; // 'lost'
        };
        let mut job = s.data.job.unwrap_or(Job {
            decided: false,
            claim: 0,
            since: 0,
            since_token: 0,
            run: 0,
        });
        if !rec.job_mark {
            // The record was (re)created since the job's last claim: decisions before the
            // claimer's floor may be lost with it.
            job.since = req.floor;
            job.since_token = 0;
            job.run = epoch;
            rec.job_mark = true;
            s.data.record = Some(rec);
        } else if job.run != epoch {
            // Restored or promoted (or gone on its own while the record is marked): decisions
            // after it was saved may be lost; only the saved claim's leader may look back.
            job.since = req.sent;
            job.since_token = if s.data.job.is_some() { job.claim } else { 0 };
            job.run = epoch;
        }
        let tick = CRON_TICK;
        if job.decided {
            // 'ours' (a retry) or 'taken'
        } else if tick < job.since && req.token != job.since_token {
            job.decided = true; // 'refused', recorded as missed
        } else {
            job.decided = true;
            job.claim = req.token;
            // 'claimed': the claimer runs the tick if it still leads under that token (its
            // reply taken as instant, the most runs); a claim it gave up on is never run.
            let c = s.clients[usize::from(req.client)];
            if c.active(s.now) && c.token == req.token {
                if s.tick_token != 0 && s.tick_token != req.token {
                    s.tick_twice = true;
                }
                s.tick_token = req.token;
            }
        }
        s.data.job = Some(job);
    }

    /// The epoch a new marker would get on this server: `run_id/replid`.
    fn epoch_of(&self, s: &State) -> u8 {
        if self.protocol.fixes().server_marker {
            s.run * 16 + s.replid
        } else {
            s.run
        }
    }

    /// What a record's `run` must be for the next script to vouch for it.
    pub fn current_epoch(&self, s: &State) -> u8 {
        match s.data.marker {
            Some(m)
                if self.protocol.fixes().server_marker
                    && m.run == s.run
                    && (m.replid == s.replid || s.replid2_zero) =>
            {
                m.epoch
            }
            _ => self.epoch_of(s),
        }
    }

    /// The server-marker design: validate `M` against the server's identity at a script's
    /// start (writing it when it changes), and return it.
    fn check_marker(&self, s: &mut State) -> Marker {
        let now = s.now;
        let epoch = self.epoch_of(s);
        let fresh = Marker {
            run: s.run,
            replid: s.replid,
            epoch,
            since: now,
            evicted: s.evicted,
            group: false,
        };
        let lists = self.protocol.fixes().marker_lists_groups;
        let mut m = match s.data.marker {
            // absent, another process, or a promotion (a new data history): a new epoch
            None => fresh,
            Some(m) if m.run != s.run || (m.replid != s.replid && !s.replid2_zero) => fresh,
            Some(mut m) => {
                // a replica attached or the backlog was freed: the same data
                m.replid = s.replid;
                if m.evicted != s.evicted && !lists {
                    // a key (maybe a record) may have been evicted
                    m.since = now;
                    m.evicted = s.evicted;
                }
                m
            }
        };
        if lists && s.data.record.is_some() {
            // Every script of the group lists it once it sees its record: a record that
            // goes missing after that is known lost, and one lost before that was last
            // extended before `M.since` (no script of the group ran since then).
            m.group = true;
        }
        s.data.marker = Some(m);
        m
    }

    fn deliver(&self, s: &mut State, reply: Reply) {
        let now = s.now;
        let req = reply.req;
        let c = &mut s.clients[usize::from(req.client)];
        let end = (req.sent + self.ttl).saturating_sub(self.margin);
        match reply.answer {
            Answer::Acquired { wait, token } => {
                let ready = match self.protocol {
                    // v1: a fresh record waits ttl from the send; else the view starts now.
                    Protocol::V1 if wait > 0 => req.sent + wait,
                    Protocol::V1 => now,
                    Protocol::V2(_) => now + wait,
                };
                if end <= now {
                    // The lease this reply grants is over already: nothing to lead.
                    return;
                }
                if ready > now {
                    s.waited = true;
                }
                // A client acquires only as a follower, and a follower has no view (it ended
                // on expiry, "gone", "superseded", release or crash), so this replaces nothing.
                c.holder = true;
                c.token = token;
                c.view = Some(View { ready, until: end });
            }
            Answer::Held => {}
            Answer::Renewed(1) => {
                if let Some(v) = c.view.as_mut() {
                    v.until = v.until.max(end);
                }
            }
            Answer::Renewed(_) => {
                // -1 superseded, 0 gone: the view ends at once (as `leader-runtime`'s election does), and
                // the client campaigns again.
                c.holder = false;
                c.view = None;
                c.token = 0;
            }
        }
    }

    /// A new server process (marker design): a new replid (replid2 zero after a restart
    /// from disk or empty, not after a failover: either way the run_id is new), and its
    /// `evicted_keys` counts from 0.
    fn new_process(&self, s: &mut State, empty_restart: bool) {
        if self.protocol.fixes().server_marker {
            s.replid = s.next_run;
            s.next_run += 1;
            s.replid2_zero = empty_restart;
            s.evicted = 0;
        }
    }

    fn restart(&self, s: &mut State, data: Data, run: u8) {
        s.data = data;
        s.run = run;
        s.down = true;
        s.faults += 1;
    }

    /// The representative of a state's class under permutations of the client ids (for
    /// [`stateright::CheckerBuilder::symmetry_fn`]): clients sorted by everything that
    /// refers to them.
    pub fn representative(s: &State) -> State {
        let n = s.clients.len();
        let key = |i: usize| {
            let i8 = i as u8;
            let mut reqs: Vec<Request> = s
                .requests
                .iter()
                .filter(|r| r.client == i8)
                .map(|r| Request { client: 0, ..*r })
                .collect();
            reqs.sort();
            let reps: Vec<Reply> = s
                .replies
                .iter()
                .filter(|r| r.req.client == i8)
                .map(|r| Reply {
                    req: Request { client: 0, ..r.req },
                    ..*r
                })
                .collect();
            (
                s.clients[i],
                reqs,
                reps,
                s.data.lease.map(|l| l.holder == i8),
                s.snapshot.map(|(d, _)| d.lease.map(|l| l.holder == i8)),
            )
        };
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_cached_key(|&i| key(i));
        // order[new] = old; perm[old] = new
        let mut perm = vec![0u8; n];
        for (new, &old) in order.iter().enumerate() {
            perm[old] = new as u8;
        }
        let mut out = s.clone();
        out.clients = order.iter().map(|&i| s.clients[i]).collect();
        for r in &mut out.requests {
            r.client = perm[usize::from(r.client)];
        }
        out.requests.sort();
        for r in &mut out.replies {
            r.req.client = perm[usize::from(r.req.client)];
        }
        out.replies.sort();
        if let Some(l) = out.data.lease.as_mut() {
            l.holder = perm[usize::from(l.holder)];
        }
        if let Some((d, _)) = out.snapshot.as_mut() {
            if let Some(l) = d.lease.as_mut() {
                l.holder = perm[usize::from(l.holder)];
            }
        }
        out
    }

    /// A compact one-line description of a state, for traces.
    pub fn describe(&self, s: &State) -> String {
        let mut out = format!("t={} run={}", s.now, s.run);
        if s.down {
            out.push_str(" DOWN");
        }
        match s.data.lease {
            Some(l) if s.now < l.expiry => {
                let _ = write!(out, " lease=c{}@<{}", l.holder, l.expiry);
            }
            _ => out.push_str(" lease=-"),
        }
        match s.data.record {
            Some(r) if self.protocol == Protocol::V1 => {
                let _ = write!(out, " record={{token {}}}", r.token);
            }
            Some(r) => {
                let _ = write!(
                    out,
                    " record={{token {}, until {}, run {}",
                    r.token, r.until, r.run
                );
                if self.protocol.fixes() != Fixes::NONE {
                    let _ = write!(out, ", floor {}", r.floor);
                }
                if r.job_mark {
                    out.push_str(", job mark");
                }
                out.push('}');
            }
            None => out.push_str(" record=-"),
        }
        if self.protocol.fixes().server_marker {
            let _ = write!(
                out,
                " replid={}{} evicted={}",
                s.replid,
                if s.replid2_zero { "" } else { " (replid2 set)" },
                s.evicted
            );
            match s.data.marker {
                Some(m) => {
                    let _ = write!(
                        out,
                        " M={{run {}, replid {}, epoch {}, since {}, evicted {}{}}}",
                        m.run,
                        m.replid,
                        m.epoch,
                        m.since,
                        m.evicted,
                        if m.group { ", lists the group" } else { "" }
                    );
                }
                None => out.push_str(" M=-"),
            }
        }
        if let Some(j) = s.data.job {
            let _ = write!(
                out,
                " job={{decided {}, claim {}, since {}, since_token {}, run {}}}",
                j.decided, j.claim, j.since, j.since_token, j.run
            );
        }
        if s.applied_max != 0 {
            let _ = write!(out, " applied={}", s.applied_max);
        }
        for (i, c) in s.clients.iter().enumerate() {
            let _ = write!(out, " | c{i}:");
            match c.view {
                Some(v) => {
                    let _ = write!(
                        out,
                        " view [{},{}){}",
                        v.ready,
                        v.until,
                        if c.active(s.now) { " ACTIVE" } else { "" }
                    );
                }
                None => out.push_str(" no view"),
            }
            if c.token != 0 {
                let _ = write!(out, " token {}", c.token);
            }
        }
        if !s.requests.is_empty() {
            let _ = write!(out, " | in flight: {}", s.requests.len());
        }
        out
    }

    /// A readable trace: each action followed by the state it leads to.
    pub fn format_trace(&self, path: &Path<State, Action>) -> String {
        let steps = path.clone().into_vec();
        let mut text = String::new();
        let mut iter = steps.iter().peekable();
        if let Some((first, _)) = iter.peek() {
            let _ = writeln!(text, "   {}", self.describe(first));
        }
        while let Some((_, action)) = iter.next() {
            if let (Some(action), Some((next, _))) = (action, iter.peek()) {
                let _ = writeln!(text, "-> {}", self.format_action_text(action));
                let _ = writeln!(text, "   {}", self.describe(next));
            }
        }
        text
    }

    fn format_action_text(&self, action: &Action) -> String {
        let op = |r: &Request| {
            if r.op.is_body() {
                format!("{:?} of c{} (token {})", r.op, r.client, r.token)
            } else if r.stale {
                format!("{:?} of c{} (given up)", r.op, r.client)
            } else {
                format!("{:?} of c{} (sent t={})", r.op, r.client, r.sent)
            }
        };
        match action {
            Action::Tick => "Tick".into(),
            Action::Send(c, o) => format!("c{c} sends {o:?}"),
            Action::Exec(r) => format!("server runs {}", op(r)),
            Action::Deliver(r) => format!("c{} receives {:?} for {}", r.req.client, r.answer, op(&r.req)),
            Action::LoseLease => "FAULT: lease key lost (eviction / DEL)".into(),
            Action::LoseAll => "FAULT: all data lost (restart empty), new run_id".into(),
            Action::TakeSnapshot => "snapshot of the data taken (RDB / replica lag point)".into(),
            Action::Restore => {
                "FAULT: snapshot restored by a new process (restart from RDB/AOF, failover to a lagging replica)".into()
            }
            Action::RestoreSameRun => {
                "FAULT: snapshot served by the process that wrote it (fail-back, DEBUG RELOAD)".into()
            }
            Action::Crash(c) => format!("FAULT: c{c} crashes and restarts"),
            Action::EvictRecord => "FAULT: record evicted (evicted_keys + 1)".into(),
            Action::EvictMarker => "FAULT: server marker evicted (evicted_keys + 1)".into(),
            Action::Flush => "FAULT: FLUSHALL (same process)".into(),
            Action::ReplidShift => {
                "FAULT: new master_replid, replid2 zero (replica attach / backlog freed)".into()
            }
            Action::ResetStat => "FAULT: CONFIG RESETSTAT (evicted_keys = 0)".into(),
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = State {
            now: 0,
            data: Data::default(),
            run: 1,
            next_run: 2,
            down: false,
            snapshot: None,
            clients: vec![Client::default(); usize::from(self.clients)],
            requests: Vec::new(),
            replies: Vec::new(),
            faults: 0,
            max_token: 0,
            token_regressed: false,
            waited: false,
            replid: 0,
            replid2_zero: true,
            evicted: 0,
            scripts: 0,
            writes: 0,
            claims: 0,
            applied_max: 0,
            stale_write: false,
            tick_token: 0,
            tick_twice: false,
            prompt_start: false,
        };
        let marker = self.protocol.fixes().server_marker;
        // The server has run long, and checked its marker long ago.
        let old_marker = marker.then_some(Marker {
            run: 1,
            replid: 0,
            epoch: self.epoch_of(&empty),
            since: 0,
            evicted: 0,
            group: false,
        });
        // A group that had leaders long ago: its record is there, its lease long expired.
        let used = State {
            data: Data {
                record: Some(Record {
                    token: 1,
                    until: 0,
                    run: self.epoch_of(&empty),
                    floor: 0,
                    job_mark: false,
                }),
                marker: old_marker.map(|m| Marker {
                    group: self.protocol.fixes().marker_lists_groups,
                    ..m
                }),
                ..Data::default()
            },
            max_token: 1,
            ..empty.clone()
        };
        let mut states = vec![empty.clone(), used];
        if marker {
            // A group never led, on a server that has run long: it may lead at once.
            states.push(State {
                data: Data {
                    marker: old_marker,
                    ..Data::default()
                },
                ..empty
            });
        }
        states
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.max_time {
            actions.push(Action::Tick);
        }
        for (i, c) in s.clients.iter().enumerate() {
            let i = i as u8;
            if c.sends < self.max_sends {
                if c.holder {
                    actions.push(Action::Send(i, Op::Renew));
                    actions.push(Action::Send(i, Op::Release));
                } else {
                    actions.push(Action::Send(i, Op::Acquire));
                }
            }
            // Fenced writes and claims come from a body running while `is_leader()`.
            if c.active(s.now) {
                if s.writes < self.max_writes {
                    actions.push(Action::Send(i, Op::Write));
                }
                if s.claims < self.max_claims && s.now >= CRON_TICK {
                    actions.push(Action::Send(i, Op::Claim));
                }
            }
        }
        if !s.down {
            actions.extend(s.requests.iter().copied().map(Action::Exec));
        }
        actions.extend(s.replies.iter().copied().map(Action::Deliver));
        if s.faults < self.max_faults {
            let f = self.faults;
            if f.lease_loss && self.lease_at(&s.data, s.now).is_some() {
                actions.push(Action::LoseLease);
            }
            if f.data_loss && s.data != Data::default() {
                actions.push(Action::LoseAll);
            }
            if let Some((snap, _)) = s.snapshot {
                if f.restore && snap != s.data {
                    actions.push(Action::Restore);
                }
                if f.restore_same_run && snap != s.data {
                    actions.push(Action::RestoreSameRun);
                }
            }
            if f.crash {
                for (i, c) in s.clients.iter().enumerate() {
                    if *c != Client::default() && c.sends < self.max_sends {
                        actions.push(Action::Crash(i as u8));
                    }
                }
            }
            if f.evict_any && s.data.record.is_some() {
                actions.push(Action::EvictRecord);
            }
            if f.evict_any && s.data.marker.is_some() {
                actions.push(Action::EvictMarker);
            }
            if f.flush && s.data != Data::default() {
                actions.push(Action::Flush);
            }
            // A promoted server keeps `master_replid2` for the backlog's ttl (an hour by
            // default, far beyond a lease ttl): see the README.
            if f.replid_shift && s.replid2_zero {
                actions.push(Action::ReplidShift);
            }
            if f.reset_stat && s.evicted != 0 {
                actions.push(Action::ResetStat);
            }
        }
        if (self.faults.restore || self.faults.restore_same_run)
            && s.faults < self.max_faults
            && s.snapshot.is_none()
            && s.data.record.is_some()
        {
            actions.push(Action::TakeSnapshot);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                s.down = false;
                s.scripts = 0;
                if s.data.lease.is_some_and(|l| l.expiry <= s.now) {
                    s.data.lease = None;
                }
                let now = s.now;
                for c in &mut s.clients {
                    if c.view.is_some_and(|v| v.until <= now) {
                        // The view ran out: the leadership is over for this client.
                        c.view = None;
                        c.holder = false;
                        c.token = 0;
                    }
                }
            }
            Action::Send(i, op @ (Op::Write | Op::Claim)) => {
                // Not a lease request: it neither counts against the client's budget nor
                // makes it give up on one; nobody waits for its reply.
                let c = s.clients[usize::from(i)];
                s.requests.push(Request {
                    client: i,
                    seq: 0,
                    stale: true,
                    op,
                    sent: s.now,
                    floor: c.view.map_or(0, |v| v.ready),
                    token: c.token,
                });
                if op == Op::Write {
                    s.writes += 1;
                } else {
                    s.claims += 1;
                }
            }
            Action::Send(i, op) => {
                let now = s.now;
                let c = &mut s.clients[usize::from(i)];
                let req = Request {
                    client: i,
                    seq: c.sends,
                    stale: op == Op::Release,
                    op,
                    sent: now,
                    floor: 0,
                    token: if op == Op::Acquire { 0 } else { c.token },
                };
                c.sends += 1;
                if op == Op::Release {
                    // The view ends before the release is sent (drain, then release).
                    c.view = None;
                    c.holder = false;
                    c.token = 0;
                }
                // Any reply to an earlier request would now be ignored.
                s.give_up(i);
                s.requests.push(req);
                s.requests.sort();
            }
            Action::Exec(req) => {
                // One of them: two requests may be alike (see the normalisation below).
                let at = s.requests.iter().position(|r| *r == req)?;
                s.requests.remove(at);
                if self.fifo && !req.op.is_body() {
                    // One connection per client: the lease requests it sent before this one
                    // are run before it, or lost (a body's writes and claims are not ordered
                    // with them).
                    s.requests
                        .retain(|r| r.client != req.client || r.seq > req.seq || r.op.is_body());
                }
                let answer = self.exec(&mut s, req);
                if self.faults.evict_any {
                    s.scripts += 1;
                }
                if let Some(answer) = answer {
                    if !req.stale {
                        s.replies.push(Reply { req, answer });
                        s.replies.sort();
                    }
                }
            }
            Action::Deliver(reply) => {
                let at = s.replies.iter().position(|r| *r == reply)?;
                s.replies.remove(at);
                self.deliver(&mut s, reply);
            }
            Action::LoseLease => {
                s.data.lease = None;
                if self.faults.evict_any {
                    // an eviction (a DEL leaves the counter; the record's `until` covers both)
                    s.evicted += 1;
                }
                s.faults += 1;
            }
            Action::LoseAll => {
                let run = s.next_run;
                s.next_run += 1;
                self.restart(&mut s, Data::default(), run);
                self.new_process(&mut s, true);
            }
            Action::TakeSnapshot => {
                s.snapshot = Some((s.data, s.run));
            }
            Action::Restore => {
                let (data, _) = s.snapshot?;
                let run = s.next_run;
                s.next_run += 1;
                self.restart(&mut s, data, run);
                self.new_process(&mut s, false);
            }
            Action::RestoreSameRun => {
                let (data, run) = s.snapshot?;
                self.restart(&mut s, data, run);
                if self.protocol.fixes().server_marker {
                    // A fail-back: the old primary, resynced from a lagging replica, is
                    // promoted again: a new replid, the old one in replid2.
                    s.replid = s.next_run;
                    s.next_run += 1;
                    s.replid2_zero = false;
                }
            }
            Action::EvictRecord => {
                s.data.record = None;
                s.evicted += 1;
                s.faults += 1;
            }
            Action::EvictMarker => {
                s.data.marker = None;
                s.evicted += 1;
                s.faults += 1;
            }
            Action::Flush => {
                // FLUSHALL takes far longer than a microsecond of the token clock, as a
                // restart does: no script runs until the next tick.
                let run = s.run;
                self.restart(&mut s, Data::default(), run);
            }
            Action::ReplidShift => {
                s.replid = s.next_run;
                s.next_run += 1;
                s.faults += 1;
            }
            Action::ResetStat => {
                s.evicted = 0;
                s.faults += 1;
            }
            Action::Crash(i) => {
                let c = &mut s.clients[usize::from(i)];
                *c = Client {
                    sends: c.sends,
                    ..Client::default()
                };
                s.give_up(i);
                s.faults += 1;
            }
        }
        // Normalise: an expired lease key is gone (keeps equal states equal).
        if s.data.lease.is_some_and(|l| l.expiry <= s.now) {
            s.data.lease = None;
        }
        // Normalise: a snapshot that can no longer be restored is as good as none.
        if s.faults >= self.max_faults {
            s.snapshot = None;
        }
        // Normalise what no later step reads, so that states alike in everything that matters
        // are one state: the send time of a request whose reply nobody waits for (only a
        // reply reads it), and the send order unless requests run in it (FIFO).
        for r in &mut s.requests {
            if r.stale && !r.op.is_body() {
                r.sent = 0;
            }
            if !self.fifo {
                r.seq = 0;
            }
        }
        s.requests.sort();
        if !self.fifo {
            for r in &mut s.replies {
                r.req.seq = 0;
            }
            s.replies.sort();
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(NO_OVERLAP, |_, s| {
                s.clients.iter().filter(|c| c.active(s.now)).count() <= 1
            }),
            Property::<Self>::always(TOKENS_GROW, |_, s| !s.token_regressed),
            Property::<Self>::always(TOKEN_CURRENT, |m, s| {
                let Some(r) = s.data.record.filter(|r| r.run == m.current_epoch(s)) else {
                    // No record (data loss, eviction), or one this server cannot vouch for
                    // (restore, failover): the leader's token may be newer.
                    return true;
                };
                // The record's token was issued at tick r.token / US_PER_TICK - 1 (or is a
                // fenced write's, older still).
                let issued = u64::from(m.ttl) + (r.token / US_PER_TICK).saturating_sub(1);
                s.clients.iter().all(|c| {
                    !c.active(s.now)
                        || c.token == r.token
                        || c.view.is_some_and(|v| u64::from(v.until) <= issued)
                })
            }),
            Property::<Self>::always(NO_STALE_WRITE, |_, s| !s.stale_write),
            Property::<Self>::always(TICK_ONCE, |_, s| !s.tick_twice),
            Property::<Self>::sometimes(SOME_VIEW, |_, s| {
                s.clients.iter().any(|c| c.active(s.now))
            }),
            Property::<Self>::sometimes(SOME_WAITED_VIEW, |_, s| {
                s.waited && s.clients.iter().any(|c| c.active(s.now))
            }),
            Property::<Self>::sometimes(SOME_WRITE, |_, s| s.applied_max != 0),
            Property::<Self>::sometimes(SOME_TICK, |_, s| s.tick_token != 0),
            Property::<Self>::sometimes(SOME_PROMPT_START, |_, s| s.prompt_start),
        ]
    }
}
