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
    /// How long to wait for each answer from Redis, in seconds.
    #[arg(long, global = true, value_name = "SECONDS", default_value_t = 2.0)]
    timeout: f64,
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
        let timeout = Duration::try_from_secs_f64(self.timeout)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| {
                ConfigError::Invalid(Error::Config {
                    field: "--timeout",
                    rule: "must be a positive number of seconds".to_owned(),
                })
            })?;
        // The lease timings only have to be consistent with the call
        // timeout: this process never leads.
        let ttl = (timeout * 4).max(leader_runtime::DEFAULT_TTL);
        builder
            .key_prefix(&self.prefix)
            .call_timeout(timeout)
            .ttl(ttl)
            .renew_interval(ttl / 3)
            .build()
            .map_err(ConfigError::Invalid)
    }
}

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
        /// How often to read the holders as well, in milliseconds (notices can be lost).
        #[arg(long, value_name = "MS", default_value_t = 250)]
        interval: u64,
    },
    /// Ask the leader of GROUP to hand over: it drains its runs, releases, and
    /// stays out of the race for one ttl.
    #[command(
        after_help = "Examples:\n  leader step-down reports\n  leader step-down reports --wait 0   # ask, don't wait\n\nExits 1 when nobody holds GROUP, or its holder still holds it after --wait."
    )]
    StepDown {
        /// The group.
        group: String,
        /// How long to wait for the hand-over, in seconds (0: don't wait).
        #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
        wait: f64,
    },
    /// Pause GROUP fleet-wide: no instance acquires it, and its leader drains and
    /// releases. Survives restarts of the instances, until `leader resume`.
    #[command(
        after_help = "Examples:\n  leader pause reports --reason 'incident 42'\n  leader pause reports --by alice --wait 0"
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
        /// How long to wait for the leader to release, in seconds (0: don't wait).
        #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
        wait: f64,
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
