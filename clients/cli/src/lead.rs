//! The commands that take something: `run`, `elect`, `observe` and `latch`.

use std::io::Write;
use std::time::Duration;

use dlock_client::{Error, LatchWait};

use crate::args::{Connection, ElectArgs, ObserveArgs, RunArgs};
use crate::child::{self, Signals, Spec};
use crate::connect::{self, Target};
use crate::{code, Failure, Outcome};

/// The exit code of a process that a signal ended: what a shell reports.
fn killed_by(signal: i32) -> u8 {
    (128 + signal).min(255) as u8
}

fn millis(duration: Duration) -> u128 {
    duration.as_millis()
}

/// The margin a bounded wait gets on top of its length before the server
/// counts as not answering: the client's `wait_margin` (docs/clients.md
/// R4.2, 2 s).
const WAIT_MARGIN: Duration = Duration::from_secs(2);

/// The failure when a stalled server (paused, frozen, a long fork) has not
/// answered by the bound of a bounded request (R4.6): exit 69.
fn stalled(target: &Target, bound: Duration) -> Failure {
    Failure::new(
        code::UNAVAILABLE,
        format!(
            "the server at {} did not answer within {bound:?} (the wait plus {WAIT_MARGIN:?}): is it stalled?",
            target.shown()
        ),
    )
}

/// The client's connect timeout (`dlock_client::Config`'s default): the
/// opening of each connection, its handshake and `CLIENT ID` included,
/// ends by it (R4.7).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves at `deadline`, never without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Connects the client by the connect timeout, or by `deadline` (the end
/// of a bounded wait, `bound` after the start) when that comes first: a
/// stalled server (frozen: TCP accepts and nothing answers; paused: the
/// handshake waits) gets no longer, where the connection manager would try
/// three times (R4.6, R4.7). Exit 69 then.
async fn open_client(
    target: &Target,
    deadline: Option<tokio::time::Instant>,
    bound: Duration,
) -> Result<dlock_client::Client, Failure> {
    let connected_by = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    let (by, late) = match deadline {
        Some(deadline) if deadline <= connected_by => (deadline, stalled(target, bound)),
        _ => (
            connected_by,
            Failure::new(
                code::UNAVAILABLE,
                format!(
                    "the server at {} did not answer the opening of a connection within {CONNECT_TIMEOUT:?} (the connect timeout): is it stalled?",
                    target.shown()
                ),
            ),
        ),
    };
    match tokio::time::timeout_at(by, connect::client(target)).await {
        Ok(client) => client,
        Err(_) => Err(late),
    }
}

fn check_ttl(ttl: Duration) -> Result<(), Failure> {
    if ttl < Duration::from_millis(1) {
        return Err(Failure::usage("--ttl must be at least 1ms"));
    }
    Ok(())
}

pub async fn run(connection: &Connection, args: RunArgs) -> Outcome {
    check_ttl(args.ttl)?;
    let mut signals = Signals::catch()?;
    let target = connect::resolve(connection).await?;
    // R4.6: with a bounded wait (or none), a stalled server never holds
    // dlock past the wait plus the margin, connecting included: the
    // client's own bounds start with each of its calls. Connecting ends by
    // the connect timeout in any case (a wait without end included).
    let waits = !args.no_wait && args.wait.is_none_or(|wait| !wait.is_zero());
    let bound = match (waits, args.wait) {
        (false, _) => Some(WAIT_MARGIN),
        (true, Some(wait)) => Some(wait + WAIT_MARGIN),
        (true, None) => None,
    };
    let deadline = bound.map(|bound| tokio::time::Instant::now() + bound);
    let client = tokio::select! {
        client = open_client(&target, deadline, bound.unwrap_or_default()) => client?,
        signal = signals.recv() => return Ok(killed_by(signal)),
    };
    let mut request = client.lock(&args.key).lease(args.ttl);
    if args.shared {
        request = request.shared();
    }
    if let Some(limit) = args.limit {
        request = request.limit(limit);
    }
    if let Some(weight) = args.weight {
        request = request.weight(weight);
    }
    if args.fair {
        request = request.fair();
    }
    if let Some(owner) = &args.owner {
        if owner.is_empty() || owner.len() > 512 {
            return Err(Failure::usage("--owner must be 1 to 512 bytes"));
        }
        request = request.owner(owner);
    }
    let immediate = request.clone();
    request = match (args.no_wait, args.wait) {
        (true, _) => request,
        (false, Some(wait)) if wait.is_zero() => request,
        (false, Some(wait)) => request.wait(wait),
        (false, None) => request.wait_forever(),
    };
    // A free lock is taken on the shared connection at once; only a busy
    // one opens the dedicated connection a wait in the queue needs (a
    // refused immediate request leaves nothing on the server, so the wait
    // joins the queue as it would have). --fair asks the server itself.
    let acquired = async {
        if waits && !args.fair {
            match immediate.acquire().await {
                Err(Error::Busy) => {}
                other => return other,
            }
        }
        request.acquire().await
    };
    let guard = tokio::select! {
        result = acquired => match result {
            Ok(guard) => guard,
            Err(Error::Busy) => {
                if let Some(wait) = args.wait.filter(|w| !w.is_zero()) {
                    eprintln!("dlock: {} is still held after waiting {wait:?}", args.key);
                }
                return Ok(args.conflict_exit_code.unwrap_or(code::NOT_ACQUIRED));
            }
            Err(Error::InvalidArgument(what)) => return Err(Failure::usage(what)),
            Err(error) => return Err(connect::refused(&target, Some(&args.key), &error)),
        },
        // Dropping the request cancels it (its clean-up runs in the
        // background, and the server drops a waiter whose connection
        // closes when dlock exits).
        () = until(deadline) => return Err(stalled(&target, bound.unwrap_or_default())),
        signal = signals.recv() => return Ok(killed_by(signal)),
    };
    let env = vec![
        ("DLOCK_KEY", args.key.clone()),
        (
            "DLOCK_OWNER",
            String::from_utf8_lossy(guard.owner()).into_owned(),
        ),
        ("DLOCK_TOKEN", guard.token().to_string()),
        ("DLOCK_TTL_MS", millis(args.ttl).to_string()),
    ];
    let spec = Spec {
        command: &args.command,
        env,
        kill_signal: args.kill_signal,
        kill_after: args.kill_after,
    };
    let ended = child::run(spec, &mut signals, guard.lost()).await;
    finish(ended, guard, &args.key, "the lock on").await
}

/// After the child: release (or resign), and the exit code.
async fn finish(
    ended: Result<child::Ended, Failure>,
    guard: dlock_client::Guard,
    key: &str,
    what: &str,
) -> Outcome {
    let lost = !guard.is_held();
    let released = guard.release().await;
    let ended = ended?;
    if ended.lost || lost {
        return Err(Failure::new(
            code::LOST,
            format!(
                "{what} {key} was lost while the command ran (the key was deleted, its lease ran out, or another owner holds it)"
            ),
        ));
    }
    if let Err(error) = released {
        eprintln!(
            "dlock: releasing {key} failed ({error}); its lease ends on the server by itself"
        );
    }
    Ok(ended.code)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "dlock".to_string())
}

pub async fn elect(connection: &Connection, args: ElectArgs) -> Outcome {
    check_ttl(args.ttl)?;
    let value = args.value.clone().unwrap_or_else(hostname);
    if value.is_empty() || value.len() > dlock_client::MAX_VALUE_LEN {
        return Err(Failure::usage(format!(
            "--value must be 1 to {} bytes",
            dlock_client::MAX_VALUE_LEN
        )));
    }
    let mut signals = Signals::catch()?;
    let target = connect::resolve(connection).await?;
    // The campaign waits without end, but connecting does not (R4.7): the
    // client's connection by the connect timeout here, the connection the
    // campaign waits on (with its CLIENT ID) by the client's own.
    let client = tokio::select! {
        client = open_client(&target, None, CONNECT_TIMEOUT) => client?,
        signal = signals.recv() => return Ok(killed_by(signal)),
    };
    let election = client.election(&args.name).lease(args.ttl);
    let leadership = tokio::select! {
        result = election.campaign(&value) => match result {
            Ok(leadership) => leadership,
            Err(Error::InvalidArgument(what)) => return Err(Failure::usage(what)),
            Err(error) => return Err(connect::refused(&target, Some(&args.name), &error)),
        },
        signal = signals.recv() => return Ok(killed_by(signal)),
    };
    if args.command.is_empty() {
        println!("{value}");
        let _ = std::io::stdout().flush();
        return tokio::select! {
            () = leadership.lost() => Err(Failure::new(
                code::LOST,
                format!("the leadership of {} was lost (the key was deleted or its lease ran out)", args.name),
            )),
            _ = signals.recv() => {
                if let Err(error) = leadership.resign().await {
                    eprintln!("dlock: resigning failed ({error}); the term ends with its lease");
                }
                Ok(0)
            }
        };
    }
    let guard_env = vec![
        ("DLOCK_KEY", args.name.clone()),
        (
            "DLOCK_OWNER",
            String::from_utf8_lossy(leadership.owner()).into_owned(),
        ),
        ("DLOCK_TOKEN", leadership.term().to_string()),
        ("DLOCK_TTL_MS", millis(args.ttl).to_string()),
    ];
    let spec = Spec {
        command: &args.command,
        env: guard_env,
        kill_signal: args.kill_signal,
        kill_after: args.kill_after,
    };
    let ended = child::run(spec, &mut signals, leadership.lost()).await;
    let lost = !leadership.is_leader();
    let resigned = leadership.resign().await;
    let ended = ended?;
    if ended.lost || lost {
        return Err(Failure::new(
            code::LOST,
            format!(
                "the leadership of {} was lost while the command ran (the key was deleted or its lease ran out)",
                args.name
            ),
        ));
    }
    if let Err(error) = resigned {
        eprintln!("dlock: resigning failed ({error}); the term ends with its lease");
    }
    Ok(ended.code)
}

pub async fn observe(connection: &Connection, args: ObserveArgs) -> Outcome {
    let target = connect::resolve(connection).await?;
    let client = connect::client(&target).await?;
    let mut observer = client.election(&args.name).observe();
    let mut printed = 0u64;
    let mut out = std::io::stdout();
    while args.count.is_none_or(|count| printed < count) {
        let state = match observer.next().await {
            Ok(state) => state,
            Err(error) if printed == 0 => {
                return Err(connect::refused(&target, Some(&args.name), &error))
            }
            Err(error) => {
                eprintln!(
                    "dlock: observing {} failed ({error}); trying again",
                    args.name
                );
                continue;
            }
        };
        let line = match (&state, args.json) {
            (Some(leader), false) => format!("{} {}", leader.value_str(), leader.term),
            (None, false) => "none".to_string(),
            (Some(leader), true) => serde_json::json!({
                "leader": leader.value_str(),
                "term": leader.term,
                "owner": String::from_utf8_lossy(&leader.owner),
            })
            .to_string(),
            (None, true) => serde_json::json!({"leader": null, "term": 0}).to_string(),
        };
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            // The reader went away (a closed pipe): nothing left to do.
            return Ok(0);
        }
        printed += 1;
    }
    Ok(0)
}

async fn latch_client(connection: &Connection) -> Result<(Target, dlock_client::Client), Failure> {
    let target = connect::resolve(connection).await?;
    let client = connect::client(&target).await?;
    Ok((target, client))
}

pub async fn latch_init(connection: &Connection, name: &str, count: u64, ttl: Duration) -> Outcome {
    check_ttl(ttl)?;
    let (target, client) = latch_client(connection).await?;
    match client.latch(name).create(count, ttl).await {
        Ok(true) => Ok(0),
        Ok(false) => {
            eprintln!("dlock: the latch {name} exists already: left as it is");
            Ok(0)
        }
        Err(Error::InvalidArgument(what)) => Err(Failure::usage(what)),
        Err(error) => Err(connect::refused(&target, Some(name), &error)),
    }
}

pub async fn latch_count_down(connection: &Connection, name: &str, n: u64) -> Outcome {
    let (target, client) = latch_client(connection).await?;
    match client.latch(name).count_down(n).await {
        Ok(left) => {
            println!("{left}");
            Ok(0)
        }
        Err(Error::InvalidArgument(what)) => Err(Failure::usage(what)),
        Err(error) => Err(connect::refused(&target, Some(name), &error)),
    }
}

pub async fn latch_wait(connection: &Connection, name: &str, wait: Option<Duration>) -> Outcome {
    let mut signals = Signals::catch()?;
    let target = connect::resolve(connection).await?;
    // R4.6: with --wait, a stalled server never holds dlock past the wait
    // plus the margin, connecting included; without, connecting ends by
    // the connect timeout (here, and in the client for the connection the
    // wait runs on), and then the wait has no end.
    let bound = wait.map(|wait| wait + WAIT_MARGIN);
    let deadline = bound.map(|bound| tokio::time::Instant::now() + bound);
    let client = tokio::select! {
        client = open_client(&target, deadline, bound.unwrap_or_default()) => client?,
        signal = signals.recv() => return Ok(killed_by(signal)),
    };
    let latch = client.latch(name);
    let waited = async {
        match wait {
            Some(wait) if wait.is_zero() => latch.wait(Duration::from_millis(1)).await,
            Some(wait) => latch.wait(wait).await,
            None => latch.wait_forever().await,
        }
    };
    tokio::select! {
        result = waited => match result {
            Ok(LatchWait::Opened) => Ok(0),
            Ok(LatchWait::TimedOut) => Ok(code::NOT_ACQUIRED),
            Ok(LatchWait::Vanished) => Err(Failure::new(
                code::LOST,
                format!("the latch {name} disappeared without opening (its ttl ended, or it was deleted)"),
            )),
            Err(error) => Err(connect::refused(&target, Some(name), &error)),
        },
        () = until(deadline) => Err(stalled(&target, bound.unwrap_or_default())),
        signal = signals.recv() => Ok(killed_by(signal)),
    }
}
