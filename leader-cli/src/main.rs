//! `leader`: see and steer which instance of a fleet leads each group.
//!
//! Everything it knows of the key layout comes from
//! [`leader_runtime::admin`]; this crate is the command line around it.

#![forbid(unsafe_code)]

mod args;
mod commands;
mod format;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, ConfigError};

/// Exit statuses, by convention (clap exits with 2 on bad arguments itself).
const FAILED: u8 = 1;
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.connection.config() {
        Ok(config) => config,
        Err(ConfigError::Missing) => {
            eprintln!(
                "leader: no Redis to talk to: pass --url, --cluster-url or --sentinel-master, \
                 or set LEADER_REDIS_URL (see `leader --help`)"
            );
            return ExitCode::from(USAGE);
        }
        Err(ConfigError::Invalid(e)) => {
            // The library's messages never include a password.
            eprintln!("leader: {e}");
            return ExitCode::from(FAILED);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("leader: cannot start: {e}");
            return ExitCode::from(FAILED);
        }
    };
    match runtime.block_on(commands::run(config, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("leader: {message}");
            ExitCode::from(FAILED)
        }
    }
}
