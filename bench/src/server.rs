//! redis-server processes for the bench: the module loaded, persistence off,
//! a free port, its own temporary directory, pinned to the server core.
//! A server is killed when its handle drops (also when a scenario fails) and,
//! through PR_SET_PDEATHSIG, when the bench itself dies.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::resp::Conn;
use crate::{sys, Config, Res};

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// Callgrind's cache simulation, with one fixed geometry (a common L1
/// instruction cache: 32 KB, 8-way, 64-byte lines) so that its counts
/// compare across machines; D1 and LL must be given alongside.
pub const CALLGRIND_CACHE_ARGS: [&str; 4] = [
    "--cache-sim=yes",
    "--I1=32768,8,64",
    "--D1=32768,8,64",
    "--LL=33554432,16,64",
];

/// How long a server gets to answer PING after it starts.
const PATIENCE: Duration = Duration::from_secs(20);

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// The command line it was started with (with `PORT` for the port).
    pub command_line: String,
    /// Whether dlock is loaded (`--loadmodule`).
    with_module: bool,
}

/// How a server is started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Launch {
    /// Pinned to the server core when pinning.
    Plain,
    /// Under valgrind's callgrind, writing its counts to `callgrind.out` in
    /// the server's directory when it exits (not pinned: instruction counts
    /// do not depend on the core).
    Callgrind,
}

impl Server {
    /// Starts a server with dlock loaded, the base arguments plus `extra`.
    pub fn start(config: &Config, extra: &[&str]) -> Res<Server> {
        Server::start_with(config, extra, true, Launch::Plain)
    }

    /// Starts a server under callgrind, with or without dlock; stop it
    /// with [`Server::shut_down`] to get its counts (see [`Server::file`]).
    pub fn start_callgrind(config: &Config, with_module: bool) -> Res<Server> {
        Server::start_with(config, &[], with_module, Launch::Callgrind)
    }

    /// Starts the same server without the module: the reference of the
    /// module-tax figures (plain Redis, as users run it before loading dlock).
    pub fn start_plain(config: &Config, extra: &[&str]) -> Res<Server> {
        Server::start_with(config, extra, false, Launch::Plain)
    }

    fn start_with(
        config: &Config,
        extra: &[&str],
        with_module: bool,
        launch: Launch,
    ) -> Res<Server> {
        let dir = std::env::temp_dir().join(format!(
            "dlock-bench-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let mut last_error = String::new();
        for _attempt in 0..5 {
            let port = free_port()?;
            let (program, args) = server_command(config, port, &dir, extra, with_module, launch);
            let mut command = Command::new(&program);
            command
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: die_with_parent only calls prctl, which is async-signal-safe.
            unsafe {
                command.pre_exec(sys::die_with_parent);
            }
            let child = command
                .spawn()
                .map_err(|e| format!("cannot start {program}: {e}"))?;
            let mut server = Server {
                child: Some(child),
                port,
                dir: dir.clone(),
                command_line: display_command(config, &dir, extra, with_module),
                with_module,
            };
            match server.wait_ready() {
                Ok(()) => {
                    if std::env::var_os("DLOCK_BENCH_VERBOSE").is_some() {
                        eprintln!(
                            "redis-server pid {} on port {port}",
                            server.pid().unwrap_or(0)
                        );
                    }
                    return Ok(server);
                }
                Err(error) => {
                    last_error = format!("{error}; log:\n{}", server.log());
                    server.kill();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(format!("redis-server did not start: {last_error}").into())
    }

    fn wait_ready(&mut self) -> Res<()> {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("redis-server exited: {status}").into());
                }
            }
            if let Ok(mut conn) = Conn::connect(self.port) {
                if let Ok(reply) = conn.call(&["PING"]) {
                    if reply.as_text().as_deref() == Some("PONG") {
                        if !self.with_module {
                            return Ok(());
                        }
                        // The module must be there: DLOCK.INFO of a missing key is null.
                        let probe = conn.call(&["DLOCK.INFO", "bench:probe"]);
                        return match probe {
                            Ok(reply) if reply.is_nil() => Ok(()),
                            other => {
                                Err(format!("the dlock module is not loaded: {other:?}").into())
                            }
                        };
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("redis-server did not answer PING in time".into())
    }

    /// A new connection.
    pub fn conn(&self) -> Res<Conn> {
        Ok(Conn::connect(self.port)?)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// A file in the server's directory (removed when the handle drops).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// SHUTDOWN NOSAVE, then waits (up to `patience`) for the process to
    /// exit, so that what it writes on exit (callgrind's counts) is there.
    pub fn shut_down(&mut self, patience: Duration) -> Res<()> {
        if let Ok(mut conn) = self.conn() {
            // The server closes the connection instead of replying.
            let _ = conn.call(&["SHUTDOWN", "NOSAVE"]);
        }
        let deadline = Instant::now() + patience;
        while let Some(child) = self.child.as_mut() {
            if child.try_wait()?.is_some() {
                self.child = None;
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("redis-server did not exit after SHUTDOWN".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The server process id (for reports and debugging).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|child| child.id())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn base_args(
    config: &Config,
    port: &str,
    dir: &str,
    extra: &[&str],
    with_module: bool,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--port",
        port,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        dir,
        "--logfile",
        "server.log",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if with_module {
        args.push("--loadmodule".into());
        args.push(config.module.display().to_string());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `base_args` for the report: the module path relative to the repository.
fn shown_args(config: &Config, extra: &[&str], with_module: bool) -> Vec<String> {
    let root = crate::repo_root();
    let mut args = base_args(config, "PORT", "DIR", extra, with_module);
    // Module paths inside the work tree are shown relative to it.
    for path in [&config.module, &config.floor_module] {
        if let Ok(relative) = path.strip_prefix(&root) {
            let shown = path.display().to_string();
            if let Some(module) = args.iter_mut().find(|a| **a == shown) {
                *module = relative.display().to_string();
            }
        }
    }
    args
}

fn server_command(
    config: &Config,
    port: u16,
    dir: &std::path::Path,
    extra: &[&str],
    with_module: bool,
    launch: Launch,
) -> (String, Vec<String>) {
    let args = base_args(
        config,
        &port.to_string(),
        &dir.display().to_string(),
        extra,
        with_module,
    );
    if launch == Launch::Callgrind {
        let mut all = vec!["--tool=callgrind".to_string()];
        all.extend(CALLGRIND_CACHE_ARGS.iter().map(|arg| arg.to_string()));
        all.extend([
            format!(
                "--callgrind-out-file={}",
                dir.join("callgrind.out").display()
            ),
            config.redis_server.clone(),
        ]);
        all.extend(args);
        return ("valgrind".to_string(), all);
    }
    match config.server_cpu {
        Some(cpu) => {
            let mut all = vec![
                "-c".to_string(),
                cpu.to_string(),
                config.redis_server.clone(),
            ];
            all.extend(args);
            ("taskset".to_string(), all)
        }
        None => (config.redis_server.clone(), args),
    }
}

/// The command line as documented: `PORT` and `DIR` stand for the free port
/// and the temporary directory of each run.
fn display_command(
    config: &Config,
    _dir: &std::path::Path,
    extra: &[&str],
    with_module: bool,
) -> String {
    let mut words = Vec::new();
    if let Some(cpu) = config.server_cpu {
        words.push(format!("taskset -c {cpu}"));
    }
    words.push(config.redis_server.clone());
    for arg in shown_args(config, extra, with_module) {
        words.push(shell_quote(&arg));
    }
    words.join(" ")
}

/// Quotes a word for a POSIX shell when it needs it.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn free_port() -> Res<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
