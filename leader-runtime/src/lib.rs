//! Run singleton work — cron jobs, cleanups, migrations, reapers — on exactly
//! one instance of a fleet, by holding a lease in Redis.
//!
//! Every replica of a service calls the same function on its own schedule;
//! `#[leader_only]` makes its body run only on the instance that holds the
//! function's *group* lease, and the call returns `None` everywhere else:
//!
//! ```no_run
//! use leader_runtime::leader_only;
//!
//! #[leader_only(group = "cleanup")]
//! async fn purge_expired() -> u64 {
//!     // runs only on the instance that holds the `cleanup` lease
//!     42
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), leader_runtime::Error> {
//! leader_runtime::init(
//!     leader_runtime::Config::builder().redis_url("redis://127.0.0.1:6379").build()?,
//! )?;
//! // every replica calls it on its own schedule; `None` where not leader
//! if let Some(purged) = purge_expired().await {
//!     println!("purged {purged}");
//! }
//! leader_runtime::shutdown().await; // at exit: hand the lease over at once
//! # Ok(()) }
//! ```
//!
//! # Contents
//!
//! - [What leader-only means](#what-leader-only-means)
//! - [Quick start](#quick-start)
//! - [The attribute](#the-attribute)
//! - [Start-up and shutdown](#start-up-and-shutdown)
//! - [Failure semantics](#failure-semantics)
//! - [Fencing](#fencing)
//! - [The lease algorithm](#the-lease-algorithm)
//! - [The cron recipe](#the-cron-recipe)
//! - [Startup work](#startup-work)
//! - [Operating it: health, draining, metrics](#operating-it-health-draining-metrics)
//! - [Redis Sentinel](#redis-sentinel)
//! - [Testing your own code on the in-memory backend](#testing-your-own-code-on-the-in-memory-backend)
//! - [Feature flags](#feature-flags)
//!
//! # What leader-only means
//!
//! A *group* is a name (`"cleanup"`, `"billing.reports"`) for one piece of
//! singleton work. For each group, the instances of a fleet that use it elect
//! one leader through a lease in Redis: a key holding the leader's instance id
//! with an expiry, renewed while the leader lives. A gated body runs only
//! where this instance's *local view* says it holds that lease, and the view
//! is fail-safe: it is true only while the lease is *certainly* still
//! unexpired on the server, so two instances never both believe they lead at
//! the same moment (as long as clocks run at the same rate — see
//! [failure semantics](#failure-semantics)).
//!
//! Each leadership carries a **fencing token**, a number strictly greater than
//! every token issued before for the group (also after Redis lost its data).
//! Hand it to any store that can reject writes carrying an older token, and
//! even a leader stalled past its lease (a long GC-like pause, a frozen VM)
//! cannot corrupt anything.
//!
//! Nothing else is coordinated: the work itself, its schedule and its retries
//! are yours. Leadership moves when the leader stops, crashes, loses Redis or
//! hands over, and every instance campaigns again after any loss by itself.
//!
//! # Quick start
//!
//! Depend on `leader-runtime` (it re-exports the attribute), configure the
//! process-wide runtime once at start-up, and gate the functions:
//!
//! ```no_run
//! use std::time::Duration;
//! use leader_runtime::{leader_only, Config, LostReason};
//!
//! #[leader_only(group = "reports")]
//! async fn build_report() -> Result<u64, std::io::Error> {
//!     let token = leader_runtime::current_lease().map(|l| l.token());
//!     println!("building the report under token {token:?}");
//!     Ok(7)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     leader_runtime::init(
//!         Config::builder()
//!             .redis_url("redis://127.0.0.1:6379")
//!             .ttl(Duration::from_secs(15)) // crash failover bound; the other timings follow it
//!             .on_lost(|group: &str, reason: LostReason| eprintln!("lost {group}: {reason}"))
//!             .build()?,
//!     )?;
//!     // Fail fast: a wrong password here is an error at once, an unreachable
//!     // Redis one within 10 s.
//!     leader_runtime::ready_for(["reports"], Duration::from_secs(10)).await?;
//!     // SIGTERM or Ctrl-C: drain, release (a follower takes over at once), stop.
//!     let stop = leader_runtime::shutdown_on_signal();
//!     tokio::pin!(stop);
//!     let mut tick = tokio::time::interval(Duration::from_secs(60));
//!     loop {
//!         tokio::select! {
//!             _ = tick.tick() => match build_report().await {
//!                 Some(Ok(n)) => println!("built {n} rows"),
//!                 Some(Err(e)) => eprintln!("report failed: {e}"),
//!                 None => {} // another instance leads "reports"
//!             },
//!             _ = &mut stop => break,
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Without [`init`], the first use configures the global runtime from the
//! environment; with nothing set it *fails closed*: gated bodies do not
//! run, and one error says how to configure it. Set one deployment (two is
//! an error; an empty variable counts as unset):
//!
//! | variable | describes |
//! | --- | --- |
//! | `LEADER_REDIS_URL` | one server: `redis://[user:password@]host:port[/db]`, `rediss://…` |
//! | `LEADER_REDIS_CLUSTER_URLS` | Redis Cluster: seed node URLs, comma-separated |
//! | `LEADER_REDIS_SENTINEL_MASTER` and `LEADER_REDIS_SENTINEL_URLS` | Sentinel: the master's name, and the sentinels' URLs, comma-separated (their credentials are the sentinels') |
//! | `LEADER_REDIS_SENTINEL_MASTER_USER`, `LEADER_REDIS_SENTINEL_MASTER_PASSWORD` | Sentinel, optional: the master's ACL user and password (the password alone for `requirepass`) |
//! | `REDIS_URL` | one server, read only when no `LEADER_REDIS_*` deployment is set |
//!
//! Everything else keeps its default. Commas inside a password must be
//! percent-encoded (`%2C`), as must `@`, `/`, `?` and `#`.
//!
//! The same surface exists as functions — [`is_leader`], [`leader_id`],
//! [`run_if_leader`], [`try_run_if_leader`], [`step_down`],
//! [`current_lease`], [`stats`], [`status`], [`set_eligible`],
//! [`subscribe`], [`ready`], [`shutdown`], [`shutdown_guard`],
//! [`shutdown_on_signal`] — and as methods
//! of an explicit [`Runtime`], so that one process can host several
//! instances (tests, demos). [`Runtime::scope`] makes a runtime the current
//! one for gated functions called inside a future.
//!
//! The repository's `examples/` run as they are: `quickstart` (three
//! instances in one process, no Redis), `programmatic` ([`init`],
//! [`subscribe`], [`run_if_leader`], [`current_lease`], [`is_leader`],
//! [`leader_id`], [`step_down`], [`stats`] and [`shutdown`], beside a second
//! instance as an explicit [`Runtime`]), `cron`, `health` (HTTP `/health` and
//! `/ready`), `metrics` (Prometheus).
//!
//! # The attribute
//!
//! [`#[leader_only]`](leader_only) goes on async and sync functions, free
//! functions and methods (`&self`, `&mut self`, `self`), with generics, where
//! clauses and `impl Trait`. The return type `T` becomes `Option<T>`:
//! `Some(value)` when the body ran, `None` when this instance does not lead
//! the group. `return` and `?` in the body keep their meaning.
//!
//! Its arguments (`group`, `cancel_on_loss`, `default` to keep the signature
//! on trait methods, `crate`), what it expands to, how it composes with
//! `#[tracing::instrument]` and `#[async_trait]`, and every misuse it rejects
//! at compile time are on the [attribute's page](leader_only): the one table
//! of them.
//!
//! ```
//! use leader_runtime::leader_only;
//!
//! struct Reaper;
//!
//! impl Reaper {
//!     /// Long work that must stop the moment leadership ends.
//!     #[leader_only(group = "reaper", cancel_on_loss)]
//!     async fn reap(&self, batch: usize) -> usize {
//!         batch
//!     }
//!
//!     /// A sync function: its first call per instance cannot wait for the
//!     /// election and returns `None`.
//!     #[leader_only(group = "reaper")]
//!     fn rotate(&mut self) {}
//! }
//! ```
//!
//! The first call that names a group registers it and starts its election.
//! That first call (when async) waits for the first acquisition round,
//! bounded by 1.5 × the call timeout, so that the winner's first tick is not
//! lost.
//! Later calls are a local check: no network, no lock, no allocation.
//!
//! # Start-up and shutdown
//!
//! **Fail fast.** No command reaches Redis before a group is used (the
//! runtime opens only its release-notice subscription at start, and a
//! failure there is a warning in the log), so a wrong password or an
//! unreachable Redis would otherwise show only as an instance that never
//! leads. [`ready`] / [`ready_for`] (and
//! [`Runtime::ready`]) wait, at most a timeout, for the backend's first
//! answer and each group's first election round, and return the error:
//! [`Error::Misconfigured`] at once when Redis refuses the configuration —
//! wrong credentials (`WRONGPASS`, a failed `AUTH`), a password missing
//! (`NOAUTH`), an ACL rule (`NOPERM`), a database the server lacks, a
//! Sentinel master name the sentinels do not know — or when the URL points
//! at a server that is not Redis (PostgreSQL's port, an HTTP server: "not
//! a Redis server at host:port") — with a hint of what to
//! check; [`Error::NotReady`] with the last error when the timeout passes
//! (Redis unreachable or still starting). [`Error::is_config`] tells errors
//! no retry fixes from the others. A readiness probe can call
//! [`Runtime::ready`] with a short timeout as often as it likes: it only
//! watches.
//!
//! **Keep saying it.** While backend calls keep failing, each group logs its
//! first failure as an ERROR, the repeats at debug level, and the runtime a
//! WARN at least once a minute with the number of calls that failed since the
//! last one ("backend calls keep failing: 120 failed in the last 59.5s"), so
//! an outage stays visible at the default log level. [`status`] shows each
//! group's `failing` and `last_error` meanwhile.
//!
//! **Hard to forget the shutdown.** A process that exits without releasing
//! its leases costs a full-`ttl` failover at every deploy. Three ways to
//! release, from most to least explicit: [`shutdown`]`().await` where your
//! program stops; [`shutdown_on_signal`]`()`, a future that completes after
//! SIGTERM or Ctrl-C has drained and released (it installs the signal
//! handlers when called, so the process then exits when you return from
//! `main`, not by the signal itself); [`shutdown_guard`]`()`, a
//! [`ShutdownGuard`] whose drop releases (however `main` ends: `?`, a panic).
//! A drop cannot `.await`: it waits for the release (at most
//! [`DEFAULT_GUARD_TIMEOUT`]) on a multi-thread tokio runtime or outside
//! tokio, and only starts it on a current-thread runtime, where blocking
//! would stall the runtime — there, prefer
//! [`ShutdownGuard::shutdown`]`().await`. [`init`] itself returns no guard,
//! so that `leader_runtime::init(config)?;` keeps the runtime.
//!
//! An invalid group name made at run time (`run_if_leader(tenant, …)` with
//! a tenant's name) gives `None`, like "not the leader", and logs an error
//! once per name; [`try_run_if_leader`] returns it as
//! [`Error::InvalidGroup`] instead. (The attribute's group is checked at
//! compile time.)
//!
//! # Failure semantics
//!
//! The leader's local view ([`is_leader`], gated calls) is true only until
//! `valid_until` = *the instant the last successful acquire or renew was
//! sent* + `ttl` − drift margin. The server started the lease's expiry no
//! earlier than that send, so the view ends before the lease can. It is a
//! compare against the monotonic clock, so it turns false on time even if
//! the election task is stuck in a slow call. (While the view's end is more
//! than 250 ms away, the gate reads the kernel's coarse monotonic clock,
//! which costs a few nanoseconds instead of tens and lags by at most a timer
//! tick; in the view's last 250 ms it reads the precise clock.)
//!
//! | what happens | what you get |
//! | --- | --- |
//! | the leader crashes (`kill -9`, OOM, lost host) | the lease expires on the server; followers learned its remaining time and retry right when it expires, so another instance leads within **`ttl`** of the last renew |
//! | the leader stops cleanly ([`shutdown`], [`shutdown_on_signal`], a [`ShutdownGuard`] dropped, or the [`Runtime`] dropped) | gated runs in flight finish first, then the lease is released and a notice published; a follower takes over in about **one round trip**. The runtime installs no signal handler unless [`shutdown_on_signal`] is called. A process that exits without any of these counts as a crash |
//! | [`step_down`] | the same drain and release; this instance stays out of the race for one `ttl` or until another instance released; alone, it takes the lease back after that |
//! | [`set_eligible(group, false)`](set_eligible) | the same drain and release, then no acquire attempts at all until `set_eligible(group, true)` |
//! | an operator runs `leader step-down <group>` ([`admin::Admin::step_down`]) | the holder it names, if it still holds the leadership of the token the request names, does what [`step_down`] does ([`Event::StepDownRequested`], then [`Event::Lost`]) |
//! | an operator runs `leader pause <group>` ([`admin::Admin::pause`]) | fleet-wide, until resumed, across restarts: no instance acquires the group ([`Event::Paused`], [`GroupStatus::paused`]); its leader notices at once, or at its next renewal if the request's notice was lost — within one `renew_interval` — and stops admitting runs; it releases once the runs in flight finished, waiting for them up to the end of its view (the lease is no longer extended) |
//! | Redis down or slow | the leader retries its renew quickly while its view is valid; the view ends at `valid_until` ([`LostReason::Expired`]), before the lease can expire on the server. Followers retry every `retry_interval`. Every call has a timeout no longer than what the view has left. When Redis is back, an election happens by itself |
//! | a network partition | the side cut off from Redis behaves as "Redis down"; the side that reaches it elects a new leader once the old lease expired on the server — after the old leader's view ended |
//! | someone else holds the key when the leader renews | the view ends at once ([`LostReason::Superseded`]) |
//! | Redis lost its data (restart without persistence, failover to an empty replica, `FLUSHALL`) | **safe start**: the group's record is gone too, and the next leader's view turns true only after one `ttl`, so no leader from before the loss can still believe it leads. A brand-new Redis looks the same, so the fleet's very first election on a server waits one `ttl`; after that, a group never named before leads after one round trip, since the server marker (see the lease algorithm) vouches that no record went missing (within one `ttl` after a flush, a restart, a failover or an eviction, a new group waits the rest of that `ttl`) |
//! | Redis lost the lease key alone (eviction under a `volatile-*` policy, a manual `DEL`) | the record still says until when the last holder may lead: a new leader takes the lease but its view begins only then — never while the old one's can still be running. The old leader's next renew finds the key gone and its view ends ([`LostReason::Expired`]) |
//! | Redis restarted from an RDB or AOF file, restored from a backup, or a replica promoted (Sentinel, a managed failover) | the records were written by another server process (its `run_id`), which may have seen renewals after the file was written or the replica fell behind: the next leader of each group waits one full `ttl` (safe start) |
//! | a replica attaches to Redis or leaves it (Redis gives the primary a new replication id) | nothing: the server marker tells this apart from a promotion, the records stay vouched for and every leader keeps its lease |
//! | a body still runs when the view ends | the case fencing tokens are for: [`current_lease`]`()`'s [`Lease::token`] is strictly greater than every earlier token of the group, also across Redis restarts; write through [`Lease::fence`] (Redis) or a conditional write ([Fencing](#fencing)). Or stop the body: `cancel_on_loss`, or `select!` on [`Lease::lost`] |
//! | the global runtime is not configured | gated bodies do not run (fail closed) and one error is logged |
//!
//! What is *not* guaranteed:
//!
//! - a process paused (or a clock that runs slow) for longer than its drift
//!   margin can act after its view should have ended — the fencing token is
//!   the defence there;
//! - the view is measured on `CLOCK_MONOTONIC`, which **does not advance
//!   while a VM or host is suspended** (a laptop lid, a paused VM, some live
//!   migrations): a leader resumed after a suspension still has, by its
//!   clock, whatever time its view had left when it was suspended, while the
//!   lease may have expired on the server and another instance may lead. It
//!   keeps believing so until its next renewal finds the lease gone (within
//!   `renew_interval`) or that remaining time runs out. A paused *process*
//!   (SIGSTOP, a long GC-like stall) is safe: the monotonic clock runs on.
//!   Fence writes from machines that can be suspended;
//! - server time: the record's times are the Redis server's wall clock
//!   (`TIME`), as are Redis's own key expiries; a server clock stepped
//!   backwards or forwards by more than the drift margin breaks both. After
//!   a failover the tokens come from the promoted replica's clock, so a
//!   replica whose clock runs behind the primary's by more than the failover
//!   takes could issue a token smaller than the last one;
//! - older data served by the *same* Redis process (`DEBUG RELOAD NOSAVE` of
//!   an older file, `RESTORE` of our keys from a backup into a running
//!   server) is not detected (DEPLOYING.md: restore by restarting);
//! - Redis replication is asynchronous, and Redis itself can have two
//!   primaries for a while (a partitioned primary keeps accepting writes
//!   until it notices): a leader renewing on an old primary while another
//!   acquires on the new one is beyond what any lease on Redis can prevent.
//!   `min-replicas-to-write` on the server (and [`ConfigBuilder::min_replicas`])
//!   bound that window; the fencing token still orders the two. See
//!   DEPLOYING.md.
//!
//! # Fencing
//!
//! **When the local view is enough.** A gated body runs only while this
//! instance's view says it leads, and the view ends before the lease can
//! expire on the server. For work whose effects are harmless twice, or short
//! next to the ttl (a body that finishes well within `valid_until`), or that
//! stops on [`Lease::lost`] / `cancel_on_loss` before each side effect, that
//! is enough.
//!
//! **When fencing is needed.** The view is checked when a body is admitted,
//! not at each write. A leader paused after admission (a long GC-like stall,
//! `SIGSTOP`, a suspended VM, swapping) or cut off from Redis while its body
//! keeps running can write *after* another instance was elected — the
//! stale write lands on top of the new leader's. Only the store can refuse
//! it: every leadership carries a fencing token ([`Lease::token`]), strictly
//! greater than every earlier token of its group, and a fenced store accepts
//! a write only if no larger token wrote before. Fence every write whose
//! loss or reordering would be wrong: counters, state machines, "last
//! processed id", money.
//!
//! **Redis, built in.** [`Lease::fence`] gives a [`Fence`]: `set`,
//! `delete`, `hset`, `incr`, `expire` and your own Lua body
//! ([`fence::FencedScript`]), each one script call that compares the token
//! with the group's *high-water mark* — the last token issued, which every
//! election raises in the group's record (`{prefix}:{group}:token`) — and
//! writes only if the token is not below it. So a deposed leader is locked
//! out from the moment its successor is *elected*, before the successor
//! writes anything. Otherwise the call returns [`Fenced::Stale`] with the
//! mark (not an error). No record (the server lost its data), or one the
//! server does not vouch for (restarted from an older RDB or AOF file,
//! promoted from a lagging replica: its mark may be older than tokens issued
//! since), refuses every write until the next election (fail closed; the
//! leader's renewal fails there too, and it acquires again with a safe
//! start). Keys must be in the group's
//! hash slot — name them with [`Fence::key`] — so the same code runs on
//! Redis Cluster; other keys are refused with [`Error::KeySlot`] before
//! anything is sent. The memory backend applies the same rule (its
//! [`MemoryBackend::get`] reads what was written).
//!
//! ```no_run
//! use leader_runtime::{leader_only, Fenced};
//!
//! #[leader_only(group = "cleanup")]
//! async fn purge_expired() -> leader_runtime::Result<()> {
//!     let fence = leader_runtime::current_lease().unwrap().fence();
//!     // … minutes of work; this process may be paused anywhere in here …
//!     match fence.set(fence.key("last-purge"), "2024-05-01T00:00:00Z").await? {
//!         Fenced::Applied(()) => {}
//!         Fenced::Stale { .. } => { /* a newer leader exists: stop */ }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! **SQL.** Keep a `fence bigint` column beside the data and make every write
//! conditional on it (tokens never exceed `i64::MAX`):
//!
//! ```sql
//! UPDATE jobs SET state = $2, fence = $3 WHERE name = $1 AND fence <= $3
//! -- or, creating the row:
//! INSERT INTO jobs (name, state, fence) VALUES ($1, $2, $3)
//! ON CONFLICT (name) DO UPDATE SET state = excluded.state, fence = excluded.fence
//!     WHERE jobs.fence <= excluded.fence
//! ```
//!
//! One row affected: applied; none: a newer leader wrote — stop. For a
//! transaction of several statements, first update one fence row of the
//! group (`UPDATE fences SET token = $t WHERE name = $g AND token <= $t`),
//! which holds that row's lock until commit, and roll back if it matched
//! nothing. `examples/fenced_postgres.rs` runs this with sqlx
//! (`cargo run --example fenced_postgres --features postgres`).
//!
//! **Other stores.** Anything with a conditional write can be fenced the same
//! way: keep the last token beside the data and write only if yours is not
//! smaller. An HTTP API with ETags: read the resource, check its stored
//! token, `PUT` it with `If-Match: <etag>` (a `412 Precondition Failed`
//! means someone wrote in between: read again). An object store's
//! conditional put (S3 `If-Match` / `If-None-Match`, GCS
//! `ifGenerationMatch`) works alike, with the token in the object or its
//! metadata. A store with no conditional write cannot be fenced; there, keep
//! bodies short next to the ttl and stop on [`Lease::lost`].
//!
//! **What it costs.** One round trip per fenced write: the check and the
//! write are one `EVALSHA`, about what a plain `SET` costs on the same
//! connection (figures in BENCHMARKS.md, `cargo bench -p leader-e2e --bench fence`); in
//! SQL, one more predicate on a row the write touches anyway.
//!
//! # The lease algorithm
//!
//! Keys of one group share one Redis Cluster hash slot: `{prefix}:{<group>}:lease`
//! (the holder's instance id, with the lease's expiry) and the group's
//! *record* `{prefix}:{<group>}:token` (a hash, no expiry):
//!
//! | field | meaning |
//! | --- | --- |
//! | `token` | the last fencing token issued (decimal, exact, at most `i64::MAX`) |
//! | `until` | server time (unix ms) until which the last holder, the current one included, may believe it leads: `max(until, now + ttl)` at every acquire and renew |
//! | `prior` | server time until which the holders *before* the current one may believe they lead |
//! | `run` | the `run_id` of the Redis process that wrote them |
//!
//! A server *vouches* for a record whose `run` is its current *epoch*: one
//! history of its data, kept in the server marker (`{prefix}:server`; on a
//! Cluster one per hash slot), which every script checks first. A new epoch
//! begins when the marker is missing (first use, `FLUSHALL`), written by
//! another process (a restart from disk, a restore, a promoted replica), or
//! when this process was promoted again after a resync from another server
//! (its replication id changed while `master_replid2` is set); a replica
//! attaching or the backlog freed after the last one left changes the
//! replication id too, but not the data, and keeps the epoch. The marker's
//! `since` moves to now with every eviction the server counts
//! (`evicted_keys`): a group with no record may lead once `since` is one
//! `ttl` old. A record deleted by hand (`DEL`) is not detected: use the
//! `leader` CLI, or stop the fleet for one `ttl`. Each operation is
//! one Lua script, atomic on the server (`backend/*.lua`, their headers say
//! the same):
//!
//! | op | semantics |
//! | --- | --- |
//! | acquire | if the group is paused (its key `{prefix}:{<group>}:paused` exists): nothing, and say so. If someone else holds the lease: return the holder and its remaining `PTTL`. Else (absent, or ours: a re-claim after an election restart) set our id with `PX ttl`, issue a token = max(last token + 1, server `TIME` in µs) (the reply names the last one too), and say how long our view must **wait**: when there is no record, what is left of one `ttl` after the server marker's `since` (below: zero for a group never named before on a server that lost nothing since the fleet first used it; one `ttl` after data loss); one `ttl` when the server does not vouch for the record (restart from disk, promoted replica, restore); else until `until` has passed (`prior` for a re-claim) — zero after a natural expiry or a clean release, the rest of the old holder's time after an eviction or `DEL`. A malformed record is an error, and nothing is written |
//! | renew | names the token of the leadership it extends. If we hold it, the server vouches for the record, the record's token is that one, and the group is not paused: `PEXPIRE ttl`, and the record's `until` follows; else say who (nobody, or someone else — also a newer leadership of ours, which an acquire of ours sent earlier and run late created: the view ends at once, as superseded), that the record is not vouched for (acquire again, with a safe start), or that it is paused — the leader then hands over as [`step_down`] does, so a leader notices a pause within one `renew_interval` even when its notice was lost (it stops admitting runs then, and releases once the runs in flight finished) |
//! | release | if we hold it: delete it, lower `until` to `max(prior, now)` (we drained and ended our view first; the holders before us may still count), and publish `"<group> <id>"` on `{prefix}:released` |
//!
//! Operators' requests ([`admin`], the `leader` CLI) arrive on
//! `{prefix}:control` over the same pub/sub connection as release notices:
//! `pause <group>` and `resume <group>` (after writing or deleting the pause
//! key, which the scripts above check, so the notice only makes it quicker)
//! and `step-down <group> <token> <holder>` (that holder hands over as
//! [`step_down`] does, if it still holds the leadership of that token). Pausing writes nothing else: the record's rules are untouched.
//!
//! **The rule:** a new leader's view begins only once every earlier holder's
//! view has certainly ended. The wait is counted from when the acquire's
//! reply *arrived*, so a slow reply cannot shorten it; the view itself lasts
//! from when the acquire was *sent*. So a graceful handover stays one round
//! trip, a crash failover stays within `ttl` of the last renew with no added
//! wait, and partial losses cost at most one `ttl` of leaderless time. The
//! rule is checked by a model of the protocol (`model/` in the repository,
//! with stateright) under message delay and loss, crashes, key loss, data
//! loss, restores of older states and failovers.
//!
//! Timings, with the [`Config`] defaults (`ttl` 15 s, `renew_interval` 5 s,
//! `retry_interval` 2 s, call timeout ≤ 2 s, drift margin 1% of `ttl` + 2 ms;
//! with another `ttl` the timings not set follow it, see
//! [`ConfigBuilder::build`]):
//!
//! - the leader renews every `renew_interval`, at a phase of it (in
//!   wall-clock time) that each instance draws once, so all the leases one
//!   instance holds are renewed together (a group just won is renewed once
//!   early, at the next such instant); a failed or
//!   timed-out renew is retried quickly (every `renew_interval / 10`,
//!   5–200 ms) while the view is valid;
//! - a follower whose acquire found a holder sleeps until that lease's `PTTL`
//!   runs out, or less when a release notice arrives on the pub/sub channel:
//!   while the expiry is far, until up to 250 ms before it (on a 250 ms
//!   wall-clock grid: a live leader has renewed by then, and the attempts of
//!   leases renewed about together fall due together); when it is near,
//!   until just after it (on a 10 ms grid); plus up to 5 ms that each
//!   instance draws per grid step; `retry_interval` paces retries only when that knowledge
//!   is missing (after an error, or while the notice connection is down).
//!   On Redis (unless leadership is balanced, or the renew interval is too
//!   short to tell a missed renewal from a late one), the early attempt
//!   comes about half a renew interval before that, and when it finds that
//!   the holder missed a renewal it names this follower the group's
//!   *heir*: the heir asks at the expiry, the other followers 200 ms later,
//!   so a crash costs Redis one take-over per lease rather than one attempt
//!   per follower. An attempt that comes a few ms before the expiry (the
//!   answer it went by came late) is made again right after it (by the
//!   earliest it can expire, again up to three times while it still comes
//!   early).
//!   So a follower (the heir, where there is one) *asks* at most 15 ms
//!   after a crashed leader's lease expires, and a graceful handover takes
//!   one round trip. With many groups per instance the last group's new
//!   view begins later than that: a leader of thousands renews them at a
//!   few phases, so at a crash they expire in waves of hundreds, each taken
//!   over by one call per follower; with balanced leadership a crash frees
//!   only one share (figures in BENCHMARKS.md, "A fleet on one Redis");
//! - the renewals of one instance that fall due together (on its renew
//!   phase) go to Redis as one
//!   `renew_many` call, and its follower attempts that fall due together as
//!   one `acquire_many` call (each group's answer is the acquire's above),
//!   per hash slot and per 500 groups. Leases renewed together expire
//!   together, so on one server a follower of `G` groups costs about
//!   `G / 500` calls per `ttl`, plus one per distinct renew instant of its
//!   leaders (on a Cluster: one per occupied hash slot instead of `G / 500`);
//! - drain before release: [`step_down`], [`set_eligible`] and [`shutdown`]
//!   first stop admitting gated runs, then wait for those in flight (bounded
//!   by what the view has left), and only then release, so the next leader
//!   never starts while a body here still runs. If a body is still running
//!   when the view ends, the lease is not released: it expires. Once a
//!   drain has begun, every gated call of that group is refused — also one
//!   made by a body in flight (recursion, a gated helper of the same group),
//!   which then gets `None` (or its `default`) mid-run: keep a body's own
//!   gated helpers of its group ungated, and pass the lease along
//!   ([`current_lease`]) where they need it. (Admitting such a call would
//!   need the drain to see it counted before it could run elsewhere: an
//!   async call can move to another thread, whose count the drain might read
//!   first.)
//!
//! # The cron recipe
//!
//! Every replica runs the same schedule, and the attribute lets one of them
//! do the work — with [tokio-cron-scheduler](https://docs.rs/tokio-cron-scheduler):
//!
//! ```no_run
//! use leader_runtime::leader_only;
//! use leader_runtime::cron::tokio_cron_scheduler::{Job, JobScheduler};
//!
//! #[leader_only(group = "reports")]
//! async fn build_report() { /* … */ }
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let scheduler = JobScheduler::new().await?;
//! scheduler
//!     .add(Job::new_async("0 */5 * * * *", |_id, _scheduler| {
//!         Box::pin(async {
//!             build_report().await; // `None` on every replica but the leader
//!         })
//!     })?)
//!     .await?;
//! scheduler.start().await?;
//! # Ok(()) }
//! ```
//!
//! That runs each tick on whichever instance leads *when its clock reaches
//! the tick*. Around a handover, or with host clocks a second apart, a tick
//! can run on both the old and the new leader. When a tick must run at most
//! once fleet-wide, use the `cron` feature's [`cron::JobBuilder`](cron/struct.JobBuilder.html):
//! the leader claims each tick in Redis, in the same script that checks the
//! lease is its own, names ticks by their scheduled time (UTC instants, in
//! the job's time zone) so skewed clocks agree, skips a tick while a run is
//! in flight, catches up or records missed ticks by a policy, and keeps a
//! history of the last runs; the [`cron`](cron/index.html) module opens with
//! its guarantees by fault:
//!
//! ```no_run
//! # #[cfg(feature = "cron")]
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use leader_runtime::cron::{JobBuilder, Missed, Overlap};
//! use leader_runtime::cron::tokio_cron_scheduler::JobScheduler;
//!
//! let scheduler = JobScheduler::new().await?;
//! let job = JobBuilder::new("0 */5 * * * *", "reports")
//!     .name("hourly-report")
//!     .overlap(Overlap::Skip)
//!     .missed(Missed::Latest)
//!     .build(|tick| async move {
//!         println!("report for {:?} (token {})", tick.scheduled(), tick.lease().token());
//!     })?;
//! scheduler.add(job).await?;
//! scheduler.start().await?;
//! # Ok(()) }
//! ```
//!
//! # Startup work
//!
//! Work that every replica wants done before it serves — create an index,
//! seed a table, run a data migration — but that must run once: [`once`]
//! runs its body on one instance while the other callers wait for the
//! result, and records the result in the backend, so that later callers and
//! restarted instances get it without running anything.
//!
//! ```no_run
//! # async fn apply_schema(_token: u64) -> Result<(), std::io::Error> { Ok(()) }
//! # async fn example() -> leader_runtime::Result<()> {
//! let done = leader_runtime::once("migrate-2026-12", || async {
//!     let token = leader_runtime::current_lease().unwrap().token();
//!     apply_schema(token).await?; // fenced with the token, or idempotent
//!     Ok::<_, std::io::Error>("added column users.locale")
//! })
//! .await?;
//! println!("{} (by {} under token {})", done.summary, done.instance_id, done.token);
//! # Ok(()) }
//! ```
//!
//! The runner holds the lease of the group `once:<name>` while the body
//! runs: [`current_lease`] answers inside, the drain and loss are those of
//! any gated body. Its success is written by one script that checks the
//! lease and the token, so a runner that lost its lease cannot record it. A
//! crashed runner's lease expires and a waiter runs its own body under a
//! greater token; a failed body releases the lease and the next caller tries
//! again, up to [`Once::attempts`] attempts fleet-wide, after which callers
//! get [`Error::OnceFailed`]. See [`Runtime::once`] for every rule, and
//! `examples/startup.rs` for a schema change on PostgreSQL.
//!
//! # Operating it: health, draining, metrics
//!
//! - **Health.** [`status`] lists each group with whether this instance
//!   leads, who does, the token, how long the view has left and the last
//!   backend error — without a network call, so a health check stays fast
//!   when Redis is not. `examples/health.rs` serves `/health` (200 while the
//!   runtime runs) and `/ready` (200 only while leading, for those who want
//!   traffic on the leader only).
//! - **Draining.** [`set_eligible(group, false)`](set_eligible) takes the
//!   instance out of the race without stopping it — before a deploy, or on a
//!   node that should not run the work; `true` puts it back. DEPLOYING.md
//!   has the recipe for one instance and every group ("Maintenance drains").
//! - **Events.** [`subscribe`] streams every transition ([`Event`]); the
//!   `on_elected` / `on_lost` callbacks of [`ConfigBuilder`] run on a thread
//!   of their own; [`stats`] keeps counters per group. Every transition is
//!   also a `tracing` event with group, instance id and token.
//! - **Release notices.** The pub/sub connection that carries them is
//!   checked with a `PING` every `retry_interval`, which must be answered
//!   within the call timeout. A connection that fails it (half-open: the
//!   peer or the path went silent without a reset) counts as down at once —
//!   followers then pace themselves by `retry_interval` instead of waiting
//!   for the lease's expiry — and is replaced. A follower already waiting for
//!   an expiry keeps that one wait.
//! - **Metrics** (feature `metrics`), through the
//!   [`metrics`](https://docs.rs/metrics) facade — the library never
//!   installs a recorder:
//!
//! | metric | kind | labels | when |
//! | --- | --- | --- | --- |
//! | `leader_elected_total` | counter | `group` | this instance became leader |
//! | `leader_lost_total` | counter | `group`, `reason` ([`LostReason::as_str`]) | a leadership ended |
//! | `leader_is_leader` | gauge | `group` | 1 while leading, else 0 (a follower exports 0 from the group's first use) |
//! | `leader_renew_seconds` | histogram | `group` | round trip of every renew call, whatever its outcome |
//! | `leader_acquire_attempts_total` | counter | `group` | an acquire call was sent |
//! | `leader_cron_runs_total` | counter | `group`, `job`, `outcome` | a cron tick's body ran here (`ok`, `error`, `panicked`, `cancelled`) |
//! | `leader_cron_late_total` | counter | `group`, `job` | a cron tick ran later than its tolerance (a catch-up run) |
//! | `leader_cron_skipped_total` | counter | `group`, `job` | a cron tick was skipped: a run of the job was in flight (`Overlap::Skip`) |
//! | `leader_cron_missed_total` | counter | `group`, `job` | this leader recorded cron ticks as missed |
//! | `leader_cron_run_seconds` | histogram | `group`, `job` | how long each cron run took |
//!
//! # Redis Sentinel
//!
//! [`ConfigBuilder::redis_sentinel`] takes the master's name and the
//! sentinels' URLs (their credentials are the sentinels'; the master's go in
//! [`ConfigBuilder::sentinel_master_auth`]; `rediss://` means TLS to both).
//! The command connection asks the sentinels for the master when it first
//! needs it and again after any call failed, timed out, or was answered
//! `READONLY` or `NOREPLICAS`; Sentinel disconnects the clients of a node it
//! demotes, and the release-notice subscription resolves the master each
//! time it connects. So the leases follow the master, and a renewal never
//! counts on a node that is a replica by then.
//!
//! What Sentinel itself allows, and what to set on the Redis nodes:
//!
//! - **The old master keeps taking writes until Sentinel demotes it.** After
//!   a failover whose old master stayed up (`SENTINEL FAILOVER`, or a
//!   partition that heals), Sentinel reconfigures the old master only
//!   several seconds later. Until then the old leader renews there, while an
//!   instance that asks the sentinels (a new one, or one whose connection
//!   broke) finds the promoted node, where the lease expired: two leaders.
//!   Measured with a forced failover and an instance joining right after it:
//!   9.2 s of two leaders (`tests/redis_sentinel.rs`,
//!   `joiner_after_forced_failover_plain`; the promoted node vouches for no
//!   record, so the joiner waited one `ttl`, but the old leader renewed on
//!   the old master for another 9 s). With `min-replicas-to-write 1`
//!   and `min-replicas-max-lag 1` on the nodes, a master cut off from its
//!   replica refuses writes (`NOREPLICAS`), the leader's view runs out, and
//!   the same run shows no overlap — at the price that nothing can be
//!   written, so nobody leads, while no replica is in sync (10 s in that
//!   run, with one replica: have at least two).
//! - **A promoted replica may lack the latest lease writes** (replication is
//!   asynchronous); see the failure semantics above and
//!   [`ConfigBuilder::min_replicas`].
//!
//! # Testing your own code on the in-memory backend
//!
//! [`MemoryBackend`] has the Redis backend's semantics (TTL, compare-and-set,
//! tokens, release notices) inside one process, on tokio's clock. Give one
//! backend to several [`Runtime`]s to play several instances, run your gated
//! functions under [`Runtime::scope`], and pause tokio's clock to test
//! timings exactly (pause it from the start, `#[tokio::test(start_paused =
//! true)]`: a leadership that began on the running clock follows a paused
//! one from its next renewal). It can also fake an outage ([`MemoryBackend::set_available`]),
//! a data loss ([`MemoryBackend::flush`]), the loss of a lease key alone
//! ([`MemoryBackend::lose_lease`]), a restart from an older snapshot or a
//! promoted replica ([`MemoryBackend::snapshot`], [`MemoryBackend::restore`])
//! and an intruder ([`MemoryBackend::overwrite`]):
//!
//! ```
//! use std::time::Duration;
//! use leader_runtime::{leader_only, Config, MemoryBackend, Runtime};
//!
//! #[leader_only(group = "billing")]
//! async fn charge() -> &'static str { "charged" }
//!
//! fn instance(backend: &MemoryBackend, id: &str) -> Runtime {
//!     let config = Config::builder()
//!         .memory(backend.clone())
//!         .ttl(Duration::from_secs(3))
//!         .renew_interval(Duration::from_secs(1))
//!         .instance_id(id)
//!         .build()
//!         .unwrap();
//!     Runtime::new(config).unwrap()
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // In a test: #[tokio::test(start_paused = true)], with tokio's `test-util` feature.
//! let backend = MemoryBackend::new();
//! let (a, b) = (instance(&backend, "a"), instance(&backend, "b"));
//! assert_eq!(a.scope(charge()).await, Some("charged")); // a wins
//! assert_eq!(b.scope(charge()).await, None);
//!
//! backend.set_available(false); // Redis "down": a's view ends within the ttl
//! tokio::time::sleep(Duration::from_secs(3)).await;
//! assert_eq!(a.scope(charge()).await, None);
//!
//! backend.set_available(true); // back: someone leads again by itself
//! tokio::time::sleep(Duration::from_secs(3)).await;
//! assert!(a.is_leader("billing") ^ b.is_leader("billing"));
//! # }
//! ```
//!
//! # Feature flags
//!
//! The API docs of every feature, as on docs.rs: `cargo doc -p leader-runtime
//! --all-features --open`; with the "Available on crate feature … only"
//! marks, on a nightly toolchain: `RUSTDOCFLAGS="--cfg docsrs" cargo +nightly
//! doc -p leader-runtime --all-features --open`.
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `metrics` | the metrics above, through the `metrics` facade; their names in [`metrics`](metrics/index.html) |
//! | `cron` | [`cron::JobBuilder`](cron/struct.JobBuilder.html): tokio-cron-scheduler jobs that run each tick at most once, on the leader, with overlap and missed-run policies, time zones and a history |
//! | `tls` | `rediss://` URLs, through rustls |
#![warn(missing_docs)]
// On docs.rs: "Available on crate feature … only" on feature-gated items.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

// The layers, lowest first: a module uses only the ones above it, outside
// its tests (ARCHITECTURE.md; checked by `tests/tidy.rs`). Blank lines keep
// rustfmt from sorting them.
mod util;

mod error;

mod names;

mod backend;

mod observe;

mod group;

mod config;

mod election;

mod runtime;

mod gate;

pub mod fence;

mod once;

#[cfg(feature = "cron")]
#[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
pub mod cron;

pub mod admin;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use crate::observe::metrics;
#[cfg(test)]
mod test_support;

use std::future::Future;

pub use leader_macros::leader_only;

use crate::group::admission;
use crate::runtime::{global, shutdown};
use tokio::sync::broadcast;

pub use crate::backend::{MemoryBackend, MemorySnapshot};
pub use crate::config::{
    Config, ConfigBuilder, DEFAULT_KEY_PREFIX, DEFAULT_RENEW_INTERVAL, DEFAULT_RETRY_INTERVAL,
    DEFAULT_TTL,
};
pub use crate::error::{BodyError, Error, Result};
pub use crate::fence::{Fence, Fenced};
pub use crate::group::lease::Lease;
pub use crate::group::status::GroupStatus;
pub use crate::observe::events::{Event, LostReason};
pub use crate::observe::stats::Stats;
pub use crate::once::{once, Once, OnceRecord, OnceStatus};
pub use crate::runtime::global::init;
pub use crate::runtime::shutdown::{ShutdownGuard, DEFAULT_GUARD_TIMEOUT};
pub use crate::runtime::Runtime;

/// Whether this instance leads `group` right now, on the current runtime
/// (the one of [`Runtime::scope`], else the global one). Sync and local,
/// never touches the network; false when no runtime is configured.
///
/// # Examples
///
/// ```no_run
/// if leader_runtime::is_leader("cleanup") {
///     println!("this replica runs the cleanup");
/// }
/// ```
pub fn is_leader(group: &str) -> bool {
    global::current().is_some_and(|rt| rt.is_leader(group))
}

/// Who leads `group`, asked of the backend.
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> leader_runtime::Result<()> {
/// match leader_runtime::leader_id("cleanup").await? {
///     Some(id) => println!("{id} runs the cleanup"),
///     None => println!("nobody holds the cleanup lease right now"),
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as
/// [`Runtime::leader_id`].
pub async fn leader_id(group: &str) -> Result<Option<String>> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .leader_id(group)
        .await
}

/// Run `f` if this instance leads `group`, telling an unusable group name
/// from "not the leader"; see [`Runtime::try_run_if_leader`].
///
/// # Examples
///
/// ```no_run
/// # async fn example(tenant: &str) -> leader_runtime::Result<()> {
/// if let Some(sent) = leader_runtime::try_run_if_leader(tenant, || async { 3 }).await? {
///     println!("sent {sent} emails for {tenant}");
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as
/// [`Runtime::try_run_if_leader`].
pub async fn try_run_if_leader<F, Fut>(group: &str, f: F) -> Result<Option<Fut::Output>>
where
    F: FnOnce() -> Fut,
    Fut: Future,
{
    global::current()
        .ok_or(Error::NotConfigured)?
        .try_run_if_leader(group, f)
        .await
}

/// Run `f` if this instance leads `group`; see [`Runtime::run_if_leader`].
///
/// # Examples
///
/// ```no_run
/// # async fn example() {
/// let sent: Option<usize> =
///     leader_runtime::run_if_leader("mailer", || async { 3 /* emails sent */ }).await;
/// # }
/// ```
pub async fn run_if_leader<F, Fut>(group: &str, f: F) -> Option<Fut::Output>
where
    F: FnOnce() -> Fut,
    Fut: Future,
{
    global::current()?.run_if_leader(group, f).await
}

/// Wait until the current runtime reached its backend and every group used so
/// far finished an election round without an error, at most `timeout`; see
/// [`Runtime::ready`]. The way to fail fast at start-up.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use leader_runtime::Config;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// leader_runtime::init(Config::builder().redis_url("redis://127.0.0.1:6379").build()?)?;
/// // A wrong password fails here at once, an unreachable Redis within 10 s.
/// leader_runtime::ready_for(["reports"], Duration::from_secs(10)).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as [`Runtime::ready`].
pub async fn ready(timeout: std::time::Duration) -> Result<()> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .ready(timeout)
        .await
}

/// [`ready`] for these groups, registering them; see [`Runtime::ready_for`].
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> leader_runtime::Result<()> {
/// leader_runtime::ready_for(["reports", "cleanup"], std::time::Duration::from_secs(10)).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as
/// [`Runtime::ready_for`].
pub async fn ready_for<'a, I>(groups: I, timeout: std::time::Duration) -> Result<()>
where
    I: IntoIterator<Item = &'a str>,
{
    global::current()
        .ok_or(Error::NotConfigured)?
        .ready_for(groups, timeout)
        .await
}

/// Hand the lease of `group` to another instance; see [`Runtime::step_down`].
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> leader_runtime::Result<()> {
/// // Before a risky operation on this host: let another instance take over.
/// leader_runtime::step_down("cleanup").await?;
/// assert!(!leader_runtime::is_leader("cleanup"));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as [`Runtime::step_down`].
pub async fn step_down(group: &str) -> Result<()> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .step_down(group)
        .await
}

/// The lease under which the current gated body runs (`None` outside one).
///
/// # Examples
///
/// ```no_run
/// # struct Store;
/// # impl Store { async fn write_fenced(&self, _token: u64, _v: &str) {} }
/// #[leader_runtime::leader_only(group = "ledger")]
/// async fn append(store: &Store) {
///     let lease = leader_runtime::current_lease().expect("inside a gated body");
///     // The store rejects writes whose token is older than the last it saw.
///     store.write_fenced(lease.token(), "entry").await;
/// }
/// ```
pub fn current_lease() -> Option<Lease> {
    admission::current_lease()
}

/// Counters of `group` on the current runtime; `None` if never used.
///
/// # Examples
///
/// ```no_run
/// if let Some(stats) = leader_runtime::stats("cleanup") {
///     println!("elected {} times, lost {} times", stats.elected, stats.lost());
/// }
/// ```
pub fn stats(group: &str) -> Option<Stats> {
    global::current()?.stats(group)
}

/// Transitions of every group on the current runtime, from now on. Without
/// a configured runtime the receiver is closed.
///
/// # Examples
///
/// ```no_run
/// # async fn example() {
/// use leader_runtime::Event;
///
/// let mut events = leader_runtime::subscribe();
/// tokio::spawn(async move {
///     while let Ok(event) = events.recv().await {
///         if let Event::Lost { group, reason, .. } = event {
///             eprintln!("lost {group}: {reason}");
///         }
///     }
/// });
/// # }
/// ```
pub fn subscribe() -> broadcast::Receiver<Event> {
    match global::current() {
        Some(rt) => rt.subscribe(),
        None => broadcast::channel(1).1,
    }
}

/// Each group of the current runtime with its state as this instance knows
/// it, for a health endpoint; empty without a runtime. Never touches the
/// network. See [`Runtime::status`] and [`GroupStatus`] (what is live and
/// what is cached).
///
/// # Examples
///
/// ```no_run
/// for group in leader_runtime::status() {
///     println!(
///         "{}: leader={} leader_id={:?} token={:?} valid_for={:?} last_error={:?}",
///         group.group, group.is_leader, group.leader_id, group.token, group.valid_for, group.last_error,
///     );
/// }
/// ```
pub fn status() -> Vec<GroupStatus> {
    global::current().map(|rt| rt.status()).unwrap_or_default()
}

/// Take this instance out of the race for `group` (`false`), or put it back
/// (`true`), on the current runtime; see [`Runtime::set_eligible`].
///
/// # Examples
///
/// ```no_run
/// # async fn before_deploy() -> leader_runtime::Result<()> {
/// // Draining before a deploy: hand the lease over and stay out of the race.
/// leader_runtime::set_eligible("cleanup", false).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as
/// [`Runtime::set_eligible`].
pub async fn set_eligible(group: &str, eligible: bool) -> Result<()> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .set_eligible(group, eligible)
        .await
}

/// Forget `group` on the current runtime: hand over if leading, end its
/// election, drop it from the registry; see [`Runtime::forget`].
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> leader_runtime::Result<()> {
/// let tenant = "tenant-42";
/// if leader_runtime::is_leader(tenant) { /* … */ }
/// // the tenant is gone: stop its election
/// leader_runtime::forget(tenant).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::NotConfigured`] without a runtime; otherwise as [`Runtime::forget`].
pub async fn forget(group: &str) -> Result<()> {
    global::current()
        .ok_or(Error::NotConfigured)?
        .forget(group)
        .await
}

/// Release every lease held by the current runtime and stop its elections;
/// see [`Runtime::shutdown`]. Does nothing without one.
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// tokio::signal::ctrl_c().await?;
/// leader_runtime::shutdown().await; // drain, release: a follower takes over at once
/// # Ok(()) }
/// ```
pub async fn shutdown() {
    shutdown::current().await;
}

/// A guard that shuts the current runtime down when dropped: drains, releases
/// every lease, waiting at most [`DEFAULT_GUARD_TIMEOUT`] where blocking is
/// safe (see [`ShutdownGuard`]). The runtime is the one current when the
/// guard is dropped, so the guard can be made before [`init`].
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let _leases = leader_runtime::shutdown_guard(); // however main ends, hand the leases over
/// leader_runtime::init(leader_runtime::Config::builder().redis_url("redis://127.0.0.1:6379").build()?)?;
/// // … the work …
/// # Ok(()) }
/// ```
pub fn shutdown_guard() -> ShutdownGuard {
    ShutdownGuard::new(None)
}

/// Wait for SIGTERM or SIGINT (Ctrl-C), then shut the current runtime down
/// (drain, release every lease); see [`Runtime::shutdown_on_signal`]. The
/// handlers are installed when this is called.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// leader_runtime::init(leader_runtime::Config::builder().redis_url("redis://127.0.0.1:6379").build()?)?;
/// tokio::select! {
///     _ = leader_runtime::shutdown_on_signal() => {} // released: exit
///     _ = serve() => {}
/// }
/// # Ok(()) }
/// # async fn serve() {}
/// ```
pub fn shutdown_on_signal() -> impl Future<Output = ()> + Send + 'static {
    shutdown::on_signal()
}

#[doc(hidden)]
/// Not public API: the contract between `#[leader_only]` expansions and the runtime.
pub mod __private {
    pub use crate::gate::future::{gate_future, Box, Default, Option};
    pub use crate::gate::{gate_async, gate_sync, CallSite};
}
