//! The command line: every command, option and its help (with an example).

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

const CONNECTION_HELP: &str = "\
Examples:
  dlock run nightly-report --no-wait -- ./report.sh    # one host at a time runs it
  dlock elect billing --value \"$(hostname)\" -- ./billing-worker
  dlock list
Each command's --help has more (dlock run --help).

Connection (one of):
  --url redis://[user:pass@]host:port/db   or DLOCK_URL (default redis://127.0.0.1:6379/)
  --cluster URL [--cluster URL ...]        seeds of a Redis Cluster
  --sentinel URL --master NAME             the master a Sentinel names
A password never has to be typed on the command line: put it in DLOCK_URL, or in
REDISCLI_AUTH (as redis-cli), used when the URL has none.";

/// Run a program under a distributed lock, elect a leader and watch locks,
/// on Redis or Valkey with the dlock module.
#[derive(Parser, Debug)]
#[command(
    name = "dlock",
    version,
    after_help = CONNECTION_HELP,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the server is.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// Server URL: redis://[user:pass@]host:port/db, rediss:// for TLS
    #[arg(
        long,
        global = true,
        env = "DLOCK_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub url: Option<String>,
    /// A seed node of a Redis Cluster (repeat for more seeds)
    #[arg(long, global = true, value_name = "URL", conflicts_with = "sentinel")]
    pub cluster: Vec<String>,
    /// A Sentinel to ask for the master's address (repeat for more); needs --master
    #[arg(long, global = true, value_name = "URL", requires = "master")]
    pub sentinel: Vec<String>,
    /// The master's name in Sentinel
    #[arg(long, global = true, value_name = "NAME")]
    pub master: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Acquire a lock, run a command while the lease is renewed, release when it ends
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Campaign for leadership; once leader run COMMAND (or hold until SIGINT/SIGTERM)
    #[command(after_help = ELECT_HELP)]
    Elect(ElectArgs),
    /// Print one line per leader change of an election
    #[command(after_help = OBSERVE_HELP)]
    Observe(ObserveArgs),
    /// Show one lock or latch: holders, queue, lease left
    #[command(after_help = INFO_HELP)]
    Info(InfoArgs),
    /// List every lock and latch key (over every master of a Cluster)
    #[command(after_help = LIST_HELP)]
    List(ListArgs),
    /// A live view of the busiest locks and the server's grants, hand-offs and expiries
    #[command(after_help = TOP_HELP)]
    Top(TopArgs),
    /// A count-down latch: a barrier for scripts
    #[command(after_help = LATCH_HELP)]
    Latch(LatchArgs),
    /// Print a completion script for bash, zsh or fish
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell
        shell: Shell,
    },
}

const RUN_HELP: &str = "\
Examples:
  dlock run nightly-report --no-wait -- ./report.sh     # skip if another host runs it
  dlock run migrate --wait 10m --ttl 1m -- ./migrate    # wait in line for up to 10 minutes
  dlock run gpu --limit 4 -- ./train.sh                 # at most 4 at once (a semaphore)

The command gets DLOCK_KEY, DLOCK_OWNER, DLOCK_TOKEN (the fencing token) and DLOCK_TTL_MS.
SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to it; the lock is released once it exits.
If dlock is killed, the command is killed too (PR_SET_PDEATHSIG) and the lease ends on the server.

Exit codes:
  N        the command's own exit code, when it ran to the end with the lock held
  128+N    the command died of signal N (137: SIGKILL)
  75       not acquired: busy with --no-wait, or --wait ran out (see --conflict-exit-code)
  76       the lock was lost while the command ran (it got --kill-signal, then SIGKILL)
  69       the server could not be reached or refused (no module, NOAUTH, NOPERM)
  64       a usage error
  126/127  the command could not be run / was not found";

const ELECT_HELP: &str = "\
Examples:
  dlock elect billing-leader --value \"$(hostname)\" -- ./billing-worker
  dlock elect billing-leader --value host-a            # prints host-a once leader, holds until Ctrl-C

The command runs only while this process leads, with DLOCK_KEY, DLOCK_OWNER, DLOCK_TOKEN (the
term) and DLOCK_TTL_MS; on loss it gets --kill-signal, then SIGKILL, and dlock exits 76.
Exit codes are those of `dlock run`; without a command, 0 after SIGINT/SIGTERM.";

const OBSERVE_HELP: &str = "\
Examples:
  dlock observe billing-leader                 # 'host-a 1795387800865543', or 'none'
  dlock observe billing-leader --json --count 1

The first line is the current leader; then one line per change, as it happens.";

const INFO_HELP: &str = "\
Examples:
  dlock info orders:42
  dlock info orders:42 --json | jq .holders";

const LIST_HELP: &str = "\
Examples:
  dlock list
  dlock list 'orders:*' --json";

const TOP_HELP: &str = "\
Examples:
  dlock top                 # refreshed every second, Ctrl-C to quit
  dlock top 'jobs:*' --once # one screen as plain text";

const LATCH_HELP: &str = "\
Examples:
  dlock latch deploy-42 init 3 --ttl 1h     # three hosts must report
  dlock latch deploy-42 count-down          # each host, when done (prints the count left)
  dlock latch deploy-42 wait --wait 10m     # exit 0 when it opens, 75 when 10 minutes pass

wait exits 76 if the latch disappears without opening (its ttl ended, it was deleted).";

const COMPLETIONS_HELP: &str = "\
Examples:
  dlock completions bash > ~/.local/share/bash-completion/completions/dlock
  dlock completions zsh > \"${fpath[1]}/_dlock\"
  dlock completions fish > ~/.config/fish/completions/dlock.fish";

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The lock's key
    pub key: String,
    /// Lease: how long the server keeps the lock without a renewal (renewed every ttl/3)
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Duration,
    /// Wait at most this long for the lock (default: wait without end)
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Do not wait: exit 75 at once when the lock is held
    #[arg(long)]
    pub no_wait: bool,
    /// Ask with DLOCK.FAIR: without a wait, keep a place in the queue for the next try
    /// (of the same --owner)
    #[arg(long)]
    pub fair: bool,
    /// The owner name (default: a new UUID per run); runs of one owner re-enter the lock
    #[arg(long, value_name = "NAME")]
    pub owner: Option<String>,
    /// Take a shared hold (a reader of a read-write lock)
    #[arg(long)]
    pub shared: bool,
    /// A semaphore: at most N shared holders (implies --shared)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Permits this hold takes out of --limit (default 1)
    #[arg(long, value_name = "W", requires = "limit", value_parser = clap::value_parser!(u32).range(1..))]
    pub weight: Option<u32>,
    /// Signal sent to the command when the lock is lost (TERM, INT, HUP, KILL, 15, ...)
    #[arg(long, default_value = "TERM", value_parser = parse_signal, value_name = "SIG")]
    pub kill_signal: i32,
    /// How long after --kill-signal the command gets SIGKILL
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_after: Duration,
    /// Exit code when the lock is not acquired (default 75), as flock -E
    #[arg(long, short = 'E', value_name = "N")]
    pub conflict_exit_code: Option<u8>,
    /// The command and its arguments (after --)
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    /// The election's name (its key)
    pub name: String,
    /// The value this candidate announces (default: the host name)
    #[arg(long, value_name = "V")]
    pub value: Option<String>,
    /// Lease of the leadership: how long a dead leader keeps the others waiting
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Duration,
    /// Signal sent to the command when leadership is lost
    #[arg(long, default_value = "TERM", value_parser = parse_signal, value_name = "SIG")]
    pub kill_signal: i32,
    /// How long after --kill-signal the command gets SIGKILL
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub kill_after: Duration,
    /// The command to run while leading (after --)
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct ObserveArgs {
    /// The election's name (its key)
    pub name: String,
    /// One JSON object per line: {"leader":"host-a","term":N} ({"leader":null,"term":0} for none)
    #[arg(long)]
    pub json: bool,
    /// Exit after N lines
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The lock's (or latch's) key
    pub key: String,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// A SCAN pattern (default *)
    #[arg(default_value = "*")]
    pub pattern: String,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// A SCAN pattern (default *)
    #[arg(default_value = "*")]
    pub pattern: String,
    /// Print one screen as plain text and exit
    #[arg(long)]
    pub once: bool,
    /// Time between refreshes (and over which --once measures the rates)
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,
    /// Locks shown (default: as many as fit, 20 with --once)
    #[arg(long, value_name = "N")]
    pub rows: Option<usize>,
}

#[derive(Args, Debug)]
pub struct LatchArgs {
    /// The latch's key
    pub name: String,
    #[command(subcommand)]
    pub action: LatchAction,
}

#[derive(Subcommand, Debug)]
pub enum LatchAction {
    /// Create the latch with COUNT (left as it is if it exists)
    Init {
        /// The count
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// How long the latch lives at most
        #[arg(long, default_value = "1h", value_parser = parse_duration, value_name = "DURATION")]
        ttl: Duration,
    },
    /// Lower the count by N (default 1) and print the count left
    CountDown {
        /// How much to count down
        #[arg(default_value = "1", value_parser = clap::value_parser!(u64).range(1..))]
        n: u64,
    },
    /// Wait until the latch opens (exit 0), --wait runs out (75) or it vanishes (76)
    Wait {
        /// Wait at most this long (default: without end)
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        wait: Option<Duration>,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Prints the completion script of `shell` on stdout.
pub fn completions(shell: Shell) {
    let mut command = Cli::command();
    let mut out = std::io::stdout();
    match shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut command, "dlock", &mut out)
        }
        Shell::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut command, "dlock", &mut out)
        }
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut command, "dlock", &mut out)
        }
    }
}

/// A duration as `250ms`, `30s`, `5m`, `1h` (decimals allowed: `1.5s`);
/// `0` alone is zero. A bare number is refused: its unit would be a guess.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("'{text}' has no unit: write it as 250ms, 30s, 5m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration: write it as 250ms, 30s, 5m or 1h"))?;
    let seconds_per_unit = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "'{text}' has an unknown unit '{unit}': use ms, s, m or h"
            ))
        }
    };
    let seconds = value * seconds_per_unit;
    if !seconds.is_finite() || seconds > 1e9 {
        return Err(format!("'{text}' is too long"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A signal by name (`TERM`, `SIGTERM`, `term`) or number (`15`).
pub fn parse_signal(text: &str) -> Result<i32, String> {
    if let Ok(number) = text.parse::<i32>() {
        if (1..=64).contains(&number) {
            return Ok(number);
        }
        return Err(format!("'{text}' is not a signal number (1 to 64)"));
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let number = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "WINCH" => libc::SIGWINCH,
        _ => {
            return Err(format!(
                "'{text}' is not a signal: use TERM, INT, HUP, QUIT, KILL, USR1, USR2 or a number"
            ))
        }
    };
    Ok(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_usual_units_and_refuse_a_bare_number() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("3d").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("sigint"), Ok(libc::SIGINT));
        assert_eq!(parse_signal("9"), Ok(9));
        assert!(parse_signal("FOO").is_err());
        assert!(parse_signal("0").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_shows_an_example_in_its_help() {
        let top = Cli::command().get_after_help().map(|h| h.to_string());
        assert!(top.unwrap_or_default().contains("Examples:"));
        for sub in Cli::command().get_subcommands() {
            let help = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                help.contains("Example"),
                "{} has no example",
                sub.get_name()
            );
        }
    }
}
