//! Test harness: real redis-server processes with the module loaded, each on
//! a free port in its own temporary directory, killed and cleaned up on drop
//! (also when the test panics).
//!
//! `DLOCK_SERVER` selects the server binary (default `redis-server`) and
//! `DLOCK_MODULE` the module (default `target/release/libdlock.so`).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use redis::{Connection, Value};

/// How long a server gets to start or to reach a state we wait for.
pub const PATIENCE: Duration = Duration::from_secs(20);

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

pub fn server_binary() -> String {
    std::env::var("DLOCK_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

pub fn module_path() -> PathBuf {
    match std::env::var("DLOCK_MODULE") {
        Ok(path) => PathBuf::from(path),
        Err(_) => {
            // A workspace member that includes this file (clients/rust)
            // builds into the workspace's target directory, further up.
            let here = Path::new(env!("CARGO_MANIFEST_DIR"));
            here.ancestors()
                .map(|dir| dir.join("target/release/libdlock.so"))
                .find(|candidate| candidate.exists())
                .unwrap_or_else(|| here.join("target/release/libdlock.so"))
        }
    }
}

/// The processes whose parent is `pid` (from `/proc/<pid>/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|candidate| {
            std::fs::read_to_string(format!("/proc/{candidate}/stat"))
                .ok()
                .and_then(|stat| {
                    // `pid (comm) state ppid ...`: comm may hold spaces.
                    let after_comm = stat.rsplit_once(')')?.1.to_string();
                    after_comm.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// A running redis-server.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    /// Whether the module is loaded (false: the same server without dlock,
    /// the reference for "loading dlock changes nothing").
    with_module: bool,
    /// A TLS-only server ([`Server::with_tls`]): the folder of its
    /// certificates (`ca.crt`, `server.*`, `client.*`); `port` is its TLS
    /// port and it has no plaintext one.
    pub tls: Option<PathBuf>,
}

impl Server {
    /// A server with persistence off.
    pub fn start() -> Server {
        Server::with_args(&["--save", "", "--appendonly", "no"])
    }

    /// A server with extra `redis-server` arguments (`--name value` pairs).
    /// A Redis Cluster node: cluster mode with its bus on a free port of its
    /// own, `node_timeout_ms` before a node counts as failed, no persistence.
    pub fn cluster_node(node_timeout_ms: &str) -> Server {
        let bus = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port for the cluster bus")
            .port()
            .to_string();
        Server::with_args(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            node_timeout_ms,
            "--cluster-port",
            &bus,
            "--save",
            "",
            "--appendonly",
            "no",
        ])
    }

    pub fn with_args(args: &[&str]) -> Server {
        Server::with_files(&[], args)
    }

    /// The same server without the module (persistence off, plus `args`).
    pub fn without_module(args: &[&str]) -> Server {
        let mut all = vec!["--save", "", "--appendonly", "no"];
        all.extend_from_slice(args);
        Server::launch(&[], &all, false)
    }

    /// A server whose directory holds `files` (name, contents) before it starts.
    pub fn with_files(files: &[(&str, &[u8])], args: &[&str]) -> Server {
        Server::launch(files, args, true)
    }

    /// A server with only a TLS port (`port 0`, `tls-port`, the settings of
    /// [`tls_settings`]) and the module, persistence off, plus `args`; its
    /// certificates are made by scripts/tls-test-certs.sh in `dir/tls`.
    /// `None` when the server binary has no TLS built in (its log says so).
    pub fn with_tls(args: &[&str]) -> Option<Server> {
        let mut all = vec!["--save", "", "--appendonly", "no"];
        all.extend_from_slice(args);
        match Server::try_launch(&[], &all, true, true) {
            Ok(server) => Some(server),
            Err(log) if log.contains("TLS support") || log.contains("connection type tls") => None,
            Err(log) => panic!("redis-server with TLS did not start; log:\n{log}"),
        }
    }

    fn launch(files: &[(&str, &[u8])], args: &[&str], with_module: bool) -> Server {
        Server::try_launch(files, args, with_module, false)
            .unwrap_or_else(|log| panic!("redis-server did not start; log:\n{log}"))
    }

    /// Starts a server (`Err`: its log, when it did not start).
    fn try_launch(
        files: &[(&str, &[u8])],
        args: &[&str],
        with_module: bool,
        tls: bool,
    ) -> Result<Server, String> {
        let dir = std::env::temp_dir().join(format!(
            "dlock-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server directory");
        for (name, contents) in files {
            std::fs::write(dir.join(name), contents).expect("write a server file");
        }
        let mut server = Server {
            child: None,
            port: 0,
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            with_module,
            tls: None,
        };
        if tls {
            let certs = server.dir.join("tls");
            make_test_certificates(&certs);
            server.tls = Some(certs);
        }
        for _attempt in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return Ok(server);
            }
        }
        Err(server.log())
    }

    /// Starts the process on `self.port`; false if it exited (port taken).
    fn spawn(&mut self) -> bool {
        let module = module_path();
        assert!(
            !self.with_module || module.exists(),
            "{} is missing: run `make build` (or `make test`) first",
            module.display()
        );
        let mut command = Command::new(server_binary());
        match &self.tls {
            None => command.arg("--port").arg(self.port.to_string()),
            Some(certs) => command.args(
                tls_settings(certs, self.port)
                    .into_iter()
                    .flat_map(|(name, value)| [format!("--{name}"), value]),
            ),
        };
        command
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg("server.log")
            .arg("--daemonize")
            .arg("no")
            // Full syncs start at once instead of after the default 5 s delay.
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        if self.with_module {
            command.arg("--loadmodule").arg(&module);
        }
        command.args(&self.args);
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let child = command.spawn().expect("spawn redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_status)) = child.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            if self.tls.is_some() {
                // No plaintext port to ask: the log, in this server's own
                // folder, says when it is up (after loading; a server that
                // cannot bind its port exits before it says so).
                if self.log().contains("Ready to accept connections") {
                    return true;
                }
            } else if let Ok(mut conn) = self.try_connect() {
                // A server that could not bind its port exits, but until it
                // has, another test's server may answer on that port: only
                // our own process counts. INFO answers while the data set
                // loads; PING only once it is loaded.
                let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut conn);
                if pong.is_ok() && self.is_own_process(&mut conn) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Whether the server answering on `conn` is the process this handle
    /// started (`process_id` of `INFO server`).
    fn is_own_process(&self, conn: &mut Connection) -> bool {
        let Some(child) = self.child.as_ref() else {
            return false;
        };
        let info: redis::RedisResult<String> = redis::cmd("INFO").arg("server").query(conn);
        info.ok().is_some_and(|info| {
            info.lines()
                .filter_map(|line| line.trim().strip_prefix("process_id:"))
                .any(|pid| pid.parse::<u32>() == Ok(child.id()))
        })
    }

    fn try_connect(&self) -> redis::RedisResult<Connection> {
        if self.tls.is_some() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a TLS-only server: connect with TLS",
            )));
        }
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    /// A new connection (RESP2).
    pub fn connect(&self) -> Connection {
        self.try_connect().expect("connect to redis-server")
    }

    /// A new connection speaking RESP3.
    pub fn connect_resp3(&self) -> Connection {
        let client =
            redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
                .expect("client");
        client.get_connection().expect("connect with RESP3")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process and the processes it forked (a child saving or
    /// streaming an RDB) at once (SIGKILL), as a crash of the machine would:
    /// a fork outlives its parent and may go on writing to a replica.
    pub fn kill_with_forks(&mut self) {
        let Some(pid) = self.child.as_ref().map(|child| child.id()) else {
            return;
        };
        for fork in children_of(pid) {
            let _ = Command::new("kill")
                .args(["-KILL", &fork.to_string()])
                .status();
        }
        self.kill();
    }

    /// Stops with `SHUTDOWN` (saving if persistence is configured) and waits.
    pub fn shutdown(&mut self) {
        if self.tls.is_some() {
            // No plaintext port to send SHUTDOWN to.
            return self.kill();
        }
        if let Ok(mut conn) = self.try_connect() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut conn);
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + PATIENCE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, directory and arguments.
    pub fn restart(&mut self) {
        self.kill();
        for _attempt in 0..50 {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not restart; log:\n{}", self.log());
    }

    /// Restarts with other arguments (same port and directory).
    pub fn restart_with_args(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self.restart();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::env::var_os("DLOCK_GRACEFUL_STOP").is_some() && self.tls.is_none() {
            // `make memcheck`: let valgrind write its report at exit.
            if let Ok(mut conn) = self.try_connect() {
                let _: redis::RedisResult<()> =
                    redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut conn);
            }
            if let Some(mut child) = self.child.take() {
                let deadline = Instant::now() + PATIENCE;
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        self.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("server log kept in {}", self.dir.display());
        }
    }
}

/// The settings of a TLS-only server whose certificates are in `certs`:
/// docs/operations.md's server block ("TLS and ACL users"), with that
/// folder for `/etc/redis/tls` and `port` for 6380.
pub fn tls_settings(certs: &Path, port: u16) -> Vec<(String, String)> {
    let file = |name: &str| certs.join(name).display().to_string();
    vec![
        ("port".into(), "0".into()),
        ("tls-port".into(), port.to_string()),
        ("tls-cert-file".into(), file("server.crt")),
        ("tls-key-file".into(), file("server.key")),
        ("tls-ca-cert-file".into(), file("ca.crt")),
        ("tls-auth-clients".into(), "no".into()),
    ]
}

/// The repository's root (where `scripts/` is), from this crate's folder up.
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("scripts/tls-test-certs.sh").exists())
        .expect("scripts/tls-test-certs.sh above this crate")
        .to_path_buf()
}

/// A test CA, a server certificate for 127.0.0.1 and localhost and a
/// client certificate in `dir` (scripts/tls-test-certs.sh, openssl).
pub fn make_test_certificates(dir: &Path) {
    let status = Command::new(repository_root().join("scripts/tls-test-certs.sh"))
        .arg(dir)
        .status()
        .expect("run scripts/tls-test-certs.sh (needs openssl)");
    assert!(
        status.success(),
        "scripts/tls-test-certs.sh failed: {status}"
    );
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// Polls `condition` until it holds or `PATIENCE` runs out.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("timed out waiting for: {what}");
}

/// Runs a command, returning the raw reply (errors as `Err`).
pub fn run(conn: &mut Connection, args: &[&[u8]]) -> redis::RedisResult<Value> {
    let mut command = redis::cmd(std::str::from_utf8(args[0]).expect("command name"));
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query(conn)
}

/// Runs a command given as strings.
pub fn cmd(conn: &mut Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    run(conn, &bytes)
}

/// The error text of a command that must fail (code and message).
pub fn error_of(conn: &mut Connection, args: &[&str]) -> String {
    match cmd(conn, args) {
        Err(error) => error_text(&error),
        Ok(value) => panic!("{args:?} should fail but replied {value:?}"),
    }
}

/// `CODE message` of a server error.
pub fn error_text(error: &redis::RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => error.to_string(),
    }
}

/// A grant reply `[token, holds, owner]`, or None for a null reply.
pub fn grant(value: Value) -> Option<(i64, i64, Vec<u8>)> {
    match value {
        Value::Nil => None,
        Value::Array(items) => match items.as_slice() {
            [Value::Int(token), Value::Int(holds), Value::BulkString(owner)] => {
                Some((*token, *holds, owner.clone()))
            }
            other => panic!("not a grant reply: {other:?}"),
        },
        other => panic!("not a grant reply: {other:?}"),
    }
}

/// DLOCK.ACQUIRE as a grant.
pub fn acquire(
    conn: &mut Connection,
    key: &str,
    owner: &str,
    ttl: u64,
) -> Option<(i64, i64, Vec<u8>)> {
    grant(cmd(conn, &["DLOCK.ACQUIRE", key, owner, &ttl.to_string()]).expect("DLOCK.ACQUIRE"))
}

/// The fields of DLOCK.INFO (RESP2 flat array or RESP3 map), None for null.
pub fn info(conn: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    info_fields(cmd(conn, &["DLOCK.INFO", key]).expect("DLOCK.INFO"))
}

/// The fields of a DLOCK.INFO reply, None for null.
pub fn info_fields(reply: Value) -> Option<Vec<(String, Value)>> {
    match reply {
        Value::Nil => None,
        Value::Array(items) => Some(
            items
                .chunks(2)
                .map(|pair| (field_name(&pair[0]), pair[1].clone()))
                .collect(),
        ),
        Value::Map(pairs) => Some(
            pairs
                .into_iter()
                .map(|(k, v)| (field_name(&k), v))
                .collect(),
        ),
        other => panic!("not an INFO reply: {other:?}"),
    }
}

fn field_name(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        other => panic!("not a field name: {other:?}"),
    }
}

/// One integer field of DLOCK.INFO.
pub fn info_int(conn: &mut Connection, key: &str, field: &str) -> i64 {
    let fields = info(conn, key).unwrap_or_else(|| panic!("{key} does not exist"));
    match fields.iter().find(|(name, _)| name == field) {
        Some((_, Value::Int(value))) => *value,
        other => panic!("field {field} of {key}: {other:?}"),
    }
}

/// The owner field of DLOCK.INFO (None when not held).
pub fn info_owner(conn: &mut Connection, key: &str) -> Option<Vec<u8>> {
    let fields = info(conn, key)?;
    match fields.iter().find(|(name, _)| name == "owner") {
        Some((_, Value::BulkString(owner))) => Some(owner.clone()),
        Some((_, Value::Nil)) => None,
        other => panic!("owner field of {key}: {other:?}"),
    }
}

/// An integer reply.
pub fn int(conn: &mut Connection, args: &[&str]) -> i64 {
    match cmd(conn, args) {
        Ok(Value::Int(value)) => value,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

/// A command encoded in RESP, as an AOF file holds it.
pub fn resp_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{}\r\n", arg.len(), arg).as_bytes());
    }
    out
}

/// An old-style `appendonly.aof` that makes the server's token counter start
/// at `token` (far above the wall-clock floor): it holds one lock `seed`
/// issued under that token, with a lease of one hour.
pub fn aof_with_token(token: u64) -> Vec<u8> {
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    resp_command(&[
        "DLOCK.SETSTATE",
        "seed",
        "HOLD",
        "seeder",
        "1",
        &token.to_string(),
        &deadline.to_string(),
    ])
}

/// The absolute expire time of a key in ms (PEXPIRETIME), -2 if missing.
pub fn pexpiretime(conn: &mut Connection, key: &str) -> i64 {
    int(conn, &["PEXPIRETIME", key])
}

/// A lock as seen from outside: key, owner, holds, token, absolute deadline.
pub type LockState = (String, Option<Vec<u8>>, i64, i64, i64);

/// Owner, holds, token and absolute deadline of every lock in `keys`.
pub fn snapshot(conn: &mut Connection, keys: &[&str]) -> Vec<LockState> {
    keys.iter()
        .map(|key| {
            let owner = info_owner(conn, key);
            let (holds, token) = if info(conn, key).is_some() {
                (info_int(conn, key, "holds"), info_int(conn, key, "token"))
            } else {
                (0, 0)
            };
            (key.to_string(), owner, holds, token, pexpiretime(conn, key))
        })
        .collect()
}

/// Polls INFO until `field:value` appears in the given section.
pub fn wait_for_info(conn: &mut Connection, section: &str, needle: &str) {
    wait_until(&format!("INFO {section} to show {needle}"), || {
        let text: String = redis::cmd("INFO")
            .arg(section)
            .query(conn)
            .unwrap_or_default();
        text.lines().any(|line| line.trim() == needle)
    });
}

// ---------------------------------------------------------------------------
// Blocking commands: waiters on their own connections and threads.
// ---------------------------------------------------------------------------

/// How long a waiter's connection waits for a reply before the test fails
/// (rather than hangs) on a command that never returns.
pub const WAITER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A new connection to the server on `port` whose reads give up after
/// `read_timeout`.
pub fn connect_port(port: u16, read_timeout: Duration) -> Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
    let conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect to redis-server");
    conn.set_read_timeout(Some(read_timeout))
        .expect("set the read timeout");
    conn
}

/// A new connection to `server` whose reads give up after `read_timeout`.
pub fn connect_patient(server: &Server, read_timeout: Duration) -> Connection {
    connect_port(server.port, read_timeout)
}

/// A command running on its own connection in its own thread (it may block).
pub struct Pending {
    /// The server-side id of its connection (for CLIENT KILL / UNBLOCK).
    pub id: i64,
    /// Just before the command was sent.
    pub sent: Instant,
    handle: std::thread::JoinHandle<(redis::RedisResult<Value>, Instant)>,
}

impl Pending {
    /// Whether the reply (or an error) has come.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits for the reply; returns it and the instant it arrived.
    pub fn join(self) -> (redis::RedisResult<Value>, Instant) {
        self.handle.join().expect("the waiter thread panicked")
    }

    /// Waits for the reply, which must be a grant `[token, holds, owner]`;
    /// returns it and the instant it arrived.
    pub fn granted(self) -> ((i64, i64, Vec<u8>), Instant) {
        let (reply, at) = self.join();
        let reply = reply.expect("the blocked command failed");
        (grant(reply).expect("the waiter got null, not the lock"), at)
    }

    /// Waits for the reply, which must be null; returns when it arrived.
    pub fn refused(self) -> Instant {
        let (reply, at) = self.join();
        assert_eq!(reply.expect("the blocked command failed"), Value::Nil);
        at
    }
}

/// Runs `args` on a new connection (database `db`) in a new thread.
pub fn spawn_command_in_db(server: &Server, db: i64, args: &[&str]) -> Pending {
    let port = server.port;
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (ready, started) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let mut conn = connect_port(port, WAITER_READ_TIMEOUT);
        if db != 0 {
            let _: () = redis::cmd("SELECT")
                .arg(db)
                .query(&mut conn)
                .expect("SELECT");
        }
        let id: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query(&mut conn)
            .expect("CLIENT ID");
        let sent = Instant::now();
        ready.send((id, sent)).expect("report the client id");
        let strs: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = cmd(&mut conn, &strs);
        (reply, Instant::now())
    });
    let (id, sent) = started
        .recv_timeout(PATIENCE)
        .expect("the waiter thread did not start");
    Pending { id, sent, handle }
}

/// Runs `args` on a new connection in a new thread.
pub fn spawn_command(server: &Server, args: &[&str]) -> Pending {
    spawn_command_in_db(server, 0, args)
}

/// The `waiting` field of DLOCK.INFO, 0 when the key does not exist.
pub fn waiting(conn: &mut Connection, key: &str) -> i64 {
    match info(conn, key) {
        None => 0,
        Some(_) => info_int(conn, key, "waiting"),
    }
}

/// The `queue` field of DLOCK.INFO as strings (empty when the key is missing).
pub fn queue(conn: &mut Connection, key: &str) -> Vec<String> {
    let Some(fields) = info(conn, key) else {
        return Vec::new();
    };
    match fields.iter().find(|(name, _)| name == "queue") {
        Some((_, Value::Array(items))) => items
            .iter()
            .map(|item| match item {
                Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => panic!("queue entry of {key}: {other:?}"),
            })
            .collect(),
        other => panic!("queue field of {key}: {other:?}"),
    }
}

/// Polls DLOCK.INFO until `waiting` is `n`.
pub fn wait_for_waiting(conn: &mut Connection, key: &str, n: i64) {
    wait_until(&format!("{key} to have {n} waiting"), || {
        waiting(conn, key) == n
    });
}

/// One `name:value` line of `INFO section`.
pub fn info_field(conn: &mut Connection, section: &str, name: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(conn).expect("INFO");
    text.lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix(&format!("{name}:"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("INFO {section} has no {name}"))
}

/// Polls `INFO clients` until `blocked_clients` is `n`.
pub fn wait_for_blocked_clients(conn: &mut Connection, n: i64) {
    wait_until(&format!("{n} blocked clients"), || {
        info_field(conn, "clients", "blocked_clients") == n.to_string()
    });
}

/// CONFIG SET name value.
pub fn config_set(conn: &mut Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(conn)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// Milliseconds since the Unix epoch (the clock Redis uses for expiry).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Sends `args` on a raw socket without reading the reply; dropping the
/// stream closes the connection, as a crashed client would.
pub fn send_raw(server: &Server, args: &[&str]) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("raw connect");
    stream.write_all(&resp_command(args)).expect("raw send");
    stream
}

// ---------------------------------------------------------------------------
// Reliability suites (stress, crash, failover): randomness, clocks, counters.
// ---------------------------------------------------------------------------

/// A small deterministic generator (splitmix64) for randomized workloads, so
/// that a failing run can be replayed from the seed it prints.
#[derive(Clone, Debug)]
pub struct TestRng(u64);

impl TestRng {
    pub fn new(seed: u64) -> TestRng {
        TestRng(seed)
    }

    /// An independent generator for stream `n` of the same seed.
    pub fn fork(seed: u64, n: u64) -> TestRng {
        let mut rng = TestRng(seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next_u64();
        rng
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The seed in environment variable `var`, or one taken from the clock.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| wall_us() as u64)
}

/// A number from environment variable `var`, or `default`.
pub fn env_number(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{var}={text} is not a number")),
        Err(_) => default,
    }
}

/// Microseconds since the Unix epoch: the clock the server uses for leases,
/// so that client-side instants compare with lease deadlines.
pub fn wall_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// `CLIENT ID` of a connection.
pub fn client_id_of(conn: &mut Connection) -> i64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query(conn)
        .expect("CLIENT ID")
}

/// A numeric `name:value` line of `INFO section`.
pub fn info_number(conn: &mut Connection, section: &str, name: &str) -> i64 {
    let text = info_field(conn, section, name);
    text.parse()
        .unwrap_or_else(|_| panic!("INFO {section} {name}:{text} is not a number"))
}

/// Whether a command failed because its connection broke (closed, reset or
/// killed), as opposed to a reply from the server or a read timeout.
pub fn is_broken_connection(error: &redis::RedisError) -> bool {
    !error.is_timeout()
        && (error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal())
}

/// A replica of `master` (persistence off, plus `extra` arguments), once its
/// link to the master is up.
pub fn replica_of(master: &Server, extra: &[&str]) -> Server {
    let port = master.port.to_string();
    let mut args = vec![
        "--save",
        "",
        "--appendonly",
        "no",
        "--replicaof",
        "127.0.0.1",
        &port,
    ];
    args.extend_from_slice(extra);
    let replica = Server::with_args(&args);
    let mut conn = replica.connect();
    wait_for_info(&mut conn, "replication", "master_link_status:up");
    replica
}

/// `WAIT 1`: the replica has acknowledged every write so far.
pub fn wait_for_replica(master: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(master).unwrap();
    assert_eq!(acked, 1, "the replica acknowledged the writes");
}

/// `DLOCK.RELEASE key owner`: the holds left.
pub fn release(conn: &mut Connection, key: &str, owner: &str) -> i64 {
    int(conn, &["DLOCK.RELEASE", key, owner])
}

/// `DLOCK.ACQUIRE key owner ttl BLOCK timeout` on its own connection.
pub fn block_acquire(server: &Server, key: &str, owner: &str, ttl: u64, timeout: u64) -> Pending {
    let (ttl, timeout) = (ttl.to_string(), timeout.to_string());
    spawn_command(
        server,
        &["DLOCK.ACQUIRE", key, owner, &ttl, "BLOCK", &timeout],
    )
}

/// `DLOCK.FAIR key owner ttl` (no BLOCK) as a grant.
pub fn fair(
    conn: &mut Connection,
    key: &str,
    owner: &str,
    ttl: u64,
) -> Option<(i64, i64, Vec<u8>)> {
    grant(cmd(conn, &["DLOCK.FAIR", key, owner, &ttl.to_string()]).expect("DLOCK.FAIR"))
}

/// Owned copies of string slices.
pub fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A server whose active expiry is off (`DEBUG SET-ACTIVE-EXPIRE 0`), so
/// that only the module's timer, or a command touching the key, can end a
/// lease; with a connection to it.
pub fn server_without_active_expiry() -> (Server, Connection) {
    let server = server_with_debug();
    let mut conn = server.connect();
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    (server, conn)
}

/// A server with persistence off and the DEBUG command enabled.
pub fn server_with_debug() -> Server {
    Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "yes",
    ])
}

/// Arguments of a server logging every write to its AOF, fsynced at once,
/// with or without the RDB preamble (`"yes"`/`"no"`).
pub fn aof_always_args(preamble: &str) -> [&str; 8] {
    [
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ]
}

/// The server's versions from `INFO server`: Valkey's (None on Redis) and
/// the Redis version it reports (Valkey 9 reports 7.2.4), as numbers.
pub struct ServerVersion {
    pub valkey: Option<Vec<u32>>,
    pub redis: Vec<u32>,
}

fn version_numbers(text: &str) -> Vec<u32> {
    text.split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect()
}

pub fn server_version(conn: &mut Connection) -> ServerVersion {
    let server: String = redis::cmd("INFO")
        .arg("server")
        .query(conn)
        .expect("INFO server");
    let field = |name: &str| {
        server
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    ServerVersion {
        valkey: field("valkey_version").map(version_numbers),
        redis: version_numbers(field("redis_version").unwrap_or("0")),
    }
}
