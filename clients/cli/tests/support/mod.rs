//! Helpers of the `dlock` command's suites: the built binary, children
//! waited on with deadlines, files polled until they say something.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Server, PATIENCE};

/// The `dlock` binary Cargo built for these tests.
pub const DLOCK: &str = env!("CARGO_BIN_EXE_dlock");

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A temporary directory for a test's files, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "dlock-cli-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Waits until the file `name` holds at least `lines` lines.
    pub fn wait_for_lines(&self, name: &str, lines: usize) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self.read(name);
            if text.lines().count() >= lines {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never reached {lines} lines: {text:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn url_of(server: &Server) -> String {
    format!("redis://127.0.0.1:{}/", server.port)
}

/// `dlock` aimed at `server` (through DLOCK_URL), with no password in the
/// environment.
pub fn dlock(server: &Server) -> Command {
    let mut command = Command::new(DLOCK);
    command
        .env("DLOCK_URL", url_of(server))
        .env_remove("REDISCLI_AUTH");
    command
}

/// Runs a `dlock` command to its end (bounded) and returns its output.
pub fn output(command: &mut Command) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dlock");
    wait_output(child, PATIENCE)
}

/// Waits for a child with piped output, killing it past `limit`.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("collect the output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the output");
            panic!(
                "dlock did not exit within {limit:?}; stdout {:?}, stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for a child (any stdio) to exit, bounded.
pub fn wait_status(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The exit code (panics when the process died of a signal).
pub fn code_of(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("dlock died of a signal: {:?}", out.status))
}

/// Whether a process runs (a zombie, dead but not reaped yet, does not).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) == 0 };
    // The state is the field after the parenthesised command name.
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false);
    exists && !zombie
}

pub fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// Polls until `condition` holds, up to `limit`.
pub fn eventually(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("timed out after {limit:?} waiting for: {what}");
}

/// `sh -c SCRIPT` as the command of `dlock run`, run in `dir`.
pub fn sh(script: &str) -> [String; 3] {
    ["sh".to_string(), "-c".to_string(), script.to_string()]
}

pub fn in_dir(command: &mut Command, dir: &Path) {
    command.current_dir(dir);
}

/// Wall-clock nanoseconds since the epoch (the clock `date +%s%N` reads).
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}
