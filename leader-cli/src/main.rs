//! `leader`: see and steer which instance of a fleet leads each group.
//!
//! Everything it knows of the key layout comes from
//! [`leader_runtime::admin`]; this crate is the command line around it.

#![forbid(unsafe_code)]

/// `println!`, but a closed stdout (`leader status | head`) ends the
/// process quietly (status 0: the reader had what it wanted) instead of
/// panicking; another write error ends it with status 1.
macro_rules! out {
    ($($arg:tt)*) => {
        crate::write_line(format_args!($($arg)*))
    };
}

mod args;
mod commands;
mod format;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, ConfigError};

fn write_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("leader: cannot write the output: {e}");
        std::process::exit(i32::from(FAILED));
    }
}

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
