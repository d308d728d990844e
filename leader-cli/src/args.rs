//! The command line: connection options shared by every command, and the commands.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use leader_runtime::{Config, ConfigBuilder, Error};

const EXAMPLES: &str = "\
Examples:
  leader status                              who leads each group, paused groups, cron runs
  leader status --json                       the same, as JSON
  leader watch                               one line per transition, until Ctrl-C
  leader step-down reports                   the leader of `reports` hands over
  leader pause reports --reason 'incident 42'
  leader resume reports
  leader history reports hourly-report       the last runs of a cron job
  leader --url rediss://ops:secret@redis.internal:6380 status
  LEADER_REDIS_CLUSTER_URLS=redis://10.0.0.1:7000,redis://10.0.0.2:7000 leader status

Connection: --url, --cluster-url or --sentinel-master with --sentinel-url; else the
environment, as the library reads it: LEADER_REDIS_URL, LEADER_REDIS_CLUSTER_URLS,
LEADER_REDIS_SENTINEL_MASTER + LEADER_REDIS_SENTINEL_URLS (and
LEADER_REDIS_SENTINEL_MASTER_USER / _PASSWORD), else REDIS_URL. Put an ACL user and
password in the URL (redis://user:password@host:6379/0); they are never printed.

Exit status: 0 done, 1 failed (unreachable, refused, nobody to ask), 2 usage error.";

/// See and steer which instance of a fleet leads each group (leader-runtime).
#[derive(Debug, Parser)]
#[command(name = "leader", version, about, after_long_help = EXAMPLES, after_help = "See `leader --help` for examples.")]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the fleet's Redis is.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct Connection {
    /// One server: redis://user:password@host:port/db (user, password and db optional), or
    /// rediss:// for TLS.
    #[arg(long, global = true, value_name = "URL", conflicts_with_all = ["cluster_url", "sentinel_master"])]
    url: Option<String>,
    /// Redis Cluster: a seed node's URL (repeat for more seeds).
    #[arg(
        long,
        global = true,
        value_name = "URL",
        conflicts_with = "sentinel_master"
    )]
    cluster_url: Vec<String>,
    /// Sentinel: the name of the master the sentinels watch.
    #[arg(long, global = true, value_name = "NAME", requires = "sentinel_url")]
    sentinel_master: Option<String>,
    /// Sentinel: a sentinel's URL (repeat for more).
    #[arg(long, global = true, value_name = "URL", requires = "sentinel_master")]
    sentinel_url: Vec<String>,
    /// The key prefix of the fleet (the library's `key_prefix`).
    #[arg(long, global = true, default_value = leader_runtime::DEFAULT_KEY_PREFIX)]
    prefix: String,
    /// How long to wait for each answer from Redis, in seconds (at most 6 hours).
    #[arg(long, global = true, value_name = "SECONDS", default_value = "2", value_parser = timeout_seconds)]
    timeout: Duration,
}

/// What the connection options could not say.
pub(crate) enum ConfigError {
    /// No option and no environment variable names a Redis.
    Missing,
    /// The library refused the settings.
    Invalid(Error),
}

impl Connection {
    /// The library's configuration for these options (no network yet).
    pub(crate) fn config(&self) -> Result<Config, ConfigError> {
        let builder = if let Some(url) = &self.url {
            Config::builder().redis_url(url)
        } else if !self.cluster_url.is_empty() {
            Config::builder().redis_cluster_urls(self.cluster_url.iter().cloned())
        } else if let Some(master) = &self.sentinel_master {
            Config::builder().redis_sentinel(master, self.sentinel_url.iter().cloned())
        } else {
            match ConfigBuilder::from_env() {
                Ok(builder) => builder,
                Err(Error::NotConfigured) => return Err(ConfigError::Missing),
                Err(e) => return Err(ConfigError::Invalid(e)),
            }
        };
        let timeout = self.timeout;
        // The lease timings only have to be consistent with the call
        // timeout: this process never leads.
        let ttl = timeout.saturating_mul(4).max(leader_runtime::DEFAULT_TTL);
        builder
            .key_prefix(&self.prefix)
            .call_timeout(timeout)
            .ttl(ttl)
            .renew_interval(ttl / 3)
            .build()
            .map_err(ConfigError::Invalid)
    }
}

/// A number of seconds, 0 or more (`1.5`): a usage error otherwise
/// (negative, NaN, infinite, too large).
fn seconds(s: &str) -> Result<Duration, String> {
    let n: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(n)
        .map_err(|_| format!("`{s}` is not a duration in seconds (0 or more)"))
}

/// Longest `--timeout`: any longer is no timeout, and the lease timings
/// derived from it (a ttl of `4 × timeout`) stay within the library's
/// longest ttl, a day.
const MAX_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

/// Longest `--wait`: scripts pass a huge number for "as long as it takes";
/// a year is that, and `now + wait` cannot overflow an `Instant`.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// `--timeout`: as [`seconds`], more than 0 and at most [`MAX_TIMEOUT`].
fn timeout_seconds(s: &str) -> Result<Duration, String> {
    match seconds(s)? {
        d if d.is_zero() => Err("must be more than 0 seconds".to_owned()),
        d if d > MAX_TIMEOUT => Err(format!(
            "must be at most 6 hours ({} seconds)",
            MAX_TIMEOUT.as_secs()
        )),
        d => Ok(d),
    }
}

/// `--wait`: as [`seconds`], at most [`MAX_WAIT`].
fn wait_seconds(s: &str) -> Result<Duration, String> {
    match seconds(s)? {
        d if d > MAX_WAIT => Err(format!(
            "must be at most a year ({} seconds)",
            MAX_WAIT.as_secs()
        )),
        d => Ok(d),
    }
}

/// Slowest `watch --interval`: one read of the known groups per this.
const MIN_INTERVAL_MS: u64 = 100;

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every group under the prefix: holder, token, time left, pause, cron jobs' last runs.
    #[command(
        after_help = "Examples:\n  leader status\n  leader status --json | jq '.groups[] | select(.paused)'"
    )]
    Status {
        /// Print JSON (one object with a `groups` array).
        #[arg(long)]
        json: bool,
    },
    /// Print one line per transition as it happens, until interrupted.
    #[command(after_help = "Example:\n  leader watch --prefix billing")]
    Watch {
        /// How often to read the known groups' holders as well, in milliseconds
        /// (notices can be lost). New groups are looked for every 15 s, or
        /// when a notice names one.
        #[arg(long, value_name = "MS", default_value_t = 1000,
              value_parser = clap::value_parser!(u64).range(MIN_INTERVAL_MS..))]
        interval: u64,
    },
    /// Ask the leader of GROUP to hand over: it drains its runs, releases, and
    /// stays out of the race for one ttl.
    #[command(
        after_help = "Examples:\n  leader step-down reports\n  leader step-down reports --wait 0   # ask, don't wait\n\nWaits (within --wait) for the next holder after the release.\nExits 1 when no instance has named GROUP, nobody holds it, or its holder still holds it after --wait."
    )]
    StepDown {
        /// The group.
        group: String,
        /// How long to wait for the hand-over, in seconds (0: don't wait; at most a year).
        #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = wait_seconds)]
        wait: Duration,
    },
    /// Pause GROUP fleet-wide: no instance acquires it, and its leader drains and
    /// releases. Survives restarts of the instances, until `leader resume`.
    #[command(
        after_help = "Examples:\n  leader pause reports --reason 'incident 42'\n  leader pause reports --by alice --wait 0\n  leader pause new-job --force   # before the deploy that adds it\n\nExits 1 when no instance has named GROUP (a typo?), unless --force."
    )]
    Pause {
        /// The group.
        group: String,
        /// Why (shown by `status`).
        #[arg(long)]
        reason: Option<String>,
        /// Who pauses (shown by `status`); by default user@host.
        #[arg(long)]
        by: Option<String>,
        /// How long to wait for the leader to release, in seconds (0: don't wait; at most a
        /// year).
        #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = wait_seconds)]
        wait: Duration,
        /// Pause a group no instance has named yet (ahead of a deploy that adds it).
        #[arg(long)]
        force: bool,
    },
    /// End the pause of GROUP: an instance acquires it again.
    #[command(after_help = "Example:\n  leader resume reports")]
    Resume {
        /// The group.
        group: String,
    },
    /// The last runs of GROUP's cron jobs (or of JOB alone), newest first.
    #[command(
        after_help = "Examples:\n  leader history reports\n  leader history reports hourly-report --json"
    )]
    History {
        /// The group.
        group: String,
        /// The job's name; all the group's jobs when left out.
        job: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}
