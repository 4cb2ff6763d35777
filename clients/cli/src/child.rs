//! The child process: started with the lock's environment and a parent-death
//! signal, given the signals `dlock` receives, stopped when the lock is lost.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::{code, Failure};

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, caught from the start so that one
/// arriving while `dlock` waits for the lock gives up the wait cleanly.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
    quit: Signal,
}

impl Signals {
    pub fn catch() -> Result<Signals, Failure> {
        let catch = |kind: SignalKind| {
            signal(kind).map_err(|error| Failure::new(70, format!("cannot catch signals: {error}")))
        };
        Ok(Signals {
            int: catch(SignalKind::interrupt())?,
            term: catch(SignalKind::terminate())?,
            hup: catch(SignalKind::hangup())?,
            quit: catch(SignalKind::quit())?,
        })
    }

    /// The next signal received (its number).
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
            _ = self.quit.recv() => libc::SIGQUIT,
        }
    }
}

/// What to run and how to stop it.
pub struct Spec<'a> {
    pub command: &'a [OsString],
    pub env: Vec<(&'static str, String)>,
    pub kill_signal: i32,
    pub kill_after: Duration,
}

/// How the child ended.
pub struct Ended {
    /// The exit code `dlock` passes on: the child's own, or 128 + signal.
    pub code: u8,
    /// Whether the lock was lost while it ran (it was then signalled).
    pub lost: bool,
}

/// Starts the child and supervises it until it exits: forwards signals,
/// and when `lost` resolves sends the kill signal, then SIGKILL after the
/// grace period.
pub async fn run(
    spec: Spec<'_>,
    signals: &mut Signals,
    lost: impl Future<Output = ()>,
) -> Result<Ended, Failure> {
    let (program, args) = spec
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no command to run: give it after --"))?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    // SAFETY: getpid is async-signal-safe and reads no memory of ours.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (prctl, getppid, raise), touching no
    // memory shared with the parent and allocating nothing.
    unsafe {
        command.pre_exec(move || {
            // The child gets SIGKILL when the thread that forked it (the
            // main thread of dlock) dies, even by SIGKILL.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // dlock died between fork and prctl: do not run orphaned.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|error| {
        let shown = program.to_string_lossy();
        if error.kind() == std::io::ErrorKind::NotFound {
            Failure::new(
                code::NOT_FOUND,
                format!("cannot run '{shown}': command not found (check its name and PATH)"),
            )
        } else {
            Failure::new(
                code::CANNOT_RUN,
                format!("cannot run '{shown}': {error} (check that it is an executable file)"),
            )
        }
    })?;
    let pid = child.id().map(|id| id as libc::pid_t);
    let send = |signal: i32| {
        if let Some(pid) = pid {
            // SAFETY: kill has no memory effects; the pid is our child's,
            // not yet reaped (we reap it only in child.wait() below).
            unsafe {
                libc::kill(pid, signal);
            }
        }
    };
    tokio::pin!(lost);
    let mut lost_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    let status = loop {
        let kill_deadline = lost_at.map(|at| at + spec.kill_after);
        tokio::select! {
            biased;
            status = child.wait() => break status,
            signal = signals.recv() => send(signal),
            () = &mut lost, if lost_at.is_none() => {
                eprintln!(
                    "dlock: the lock was lost: sending {} to the command (SIGKILL in {:?})",
                    signal_name(spec.kill_signal),
                    spec.kill_after
                );
                send(spec.kill_signal);
                lost_at = Some(tokio::time::Instant::now());
            }
            () = sleep_until(kill_deadline), if kill_deadline.is_some() && !killed => {
                eprintln!("dlock: the command did not exit after {:?}: sending SIGKILL", spec.kill_after);
                send(libc::SIGKILL);
                killed = true;
            }
        }
    };
    let status = status
        .map_err(|error| Failure::new(70, format!("waiting for the command failed: {error}")))?;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(signal)) => (128 + signal).min(255) as u8,
        (None, None) => 255,
    };
    Ok(Ended {
        code,
        lost: lost_at.is_some(),
    })
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// SIGTERM, SIGKILL, ... for messages.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGWINCH => "SIGWINCH",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}
