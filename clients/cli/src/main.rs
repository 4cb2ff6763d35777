//! `dlock`: run a program under a distributed lock, elect a leader and
//! watch locks from the shell, on dlock's Redis module through the Rust
//! client (`dlock-client`).
//!
//! Exit codes (docs/cli.md): the child's own; 128 + N when it died of signal
//! N; 75 not acquired; 76 lost; 69 server unreachable or refusing; 64 usage.

mod args;
mod child;
mod connect;
mod inspect;
mod lead;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command, LatchAction};

/// Exit codes, as sysexits.h names them where one fits.
pub mod code {
    /// Not acquired: busy with `--no-wait`, or `--wait` ran out (EX_TEMPFAIL).
    pub const NOT_ACQUIRED: u8 = 75;
    /// The lock (or leadership) was lost while the child ran.
    pub const LOST: u8 = 76;
    /// The server could not be reached or refused (EX_UNAVAILABLE).
    pub const UNAVAILABLE: u8 = 69;
    /// A usage error (EX_USAGE).
    pub const USAGE: u8 = 64;
    /// The command could not be found (as env, timeout and the shells).
    pub const NOT_FOUND: u8 = 127;
    /// The command was found but could not be run.
    pub const CANNOT_RUN: u8 = 126;
}

/// What a command ends with: an exit code, and a message for stderr.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(code::USAGE, message)
    }
}

pub type Outcome = Result<u8, Failure>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            let _ = error.print();
            return match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(code::USAGE),
            };
        }
    };
    // One thread: the child is started from the main thread, which lives as
    // long as the process, so PR_SET_PDEATHSIG (tied to the thread that
    // forked) fires only when dlock itself dies.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("dlock: cannot start the async runtime: {error}");
            return ExitCode::from(70);
        }
    };
    let outcome = runtime.block_on(dispatch(cli));
    // Background tasks (a release after a cancelled wait) get no more time:
    // the leases bound what they would have cleaned up.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("dlock: {}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Outcome {
    let target = &cli.connection;
    match cli.command {
        Command::Run(run) => lead::run(target, run).await,
        Command::Elect(elect) => lead::elect(target, elect).await,
        Command::Observe(observe) => lead::observe(target, observe).await,
        Command::Info(info) => inspect::info(target, info).await,
        Command::List(list) => inspect::list(target, list).await,
        Command::Top(top) => inspect::top(target, top).await,
        Command::Latch(latch) => match latch.action {
            LatchAction::Init { count, ttl } => {
                lead::latch_init(target, &latch.name, count, ttl).await
            }
            LatchAction::CountDown { n } => lead::latch_count_down(target, &latch.name, n).await,
            LatchAction::Wait { wait } => lead::latch_wait(target, &latch.name, wait).await,
        },
        Command::Completions { shell } => {
            args::completions(shell);
            Ok(0)
        }
    }
}
