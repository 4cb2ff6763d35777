//! `make run`: each port runs in its own directory under target/run/, so
//! two servers never share files, the work tree is never written (not even
//! by CONFIG REWRITE or the RDB saved at shutdown), and a second run on a
//! port finds the first run's locks.
//!
//! The test runs the real `make run` with `-o build` (cargo is already
//! running this test, so the module is built and the build must not start
//! again while cargo holds its lock).

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// `git status` of the work tree including ignored files (a dump.rdb or an
/// appendonlydir/ in the work tree is ignored by .gitignore but listed
/// here), or None where the tree is not a git checkout.
fn work_tree_status() -> Option<String> {
    let output = Command::new("git")
        .args([
            "status",
            "--porcelain",
            "--ignored",
            "--untracked-files=all",
        ])
        .current_dir(repo())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    // target/ is where `make run` is meant to write. The clients' folders
    // and dist/ are left out too: `make test`'s other lane builds there
    // (jars, node_modules, the artifacts) while this test runs, and `make
    // run` starts the server from the repository's root, where a stray
    // dump.rdb or appendonlydir would show.
    let written_by_other_builds = |path: &str| {
        path.starts_with("target/")
            || path.contains("/target/")
            || path.starts_with("clients/")
            || path.starts_with("dist/")
    };
    Some(
        text.lines()
            .filter(|line| !written_by_other_builds(line.get(3..).unwrap_or("").trim_matches('"')))
            .map(|line| format!("{line}\n"))
            .collect(),
    )
}

/// One `make run` process and the directory its server uses.
struct MakeRun {
    child: Option<Child>,
    port: u16,
}

impl MakeRun {
    fn start(port: u16) -> MakeRun {
        let child = Command::new("make")
            .args(["--no-print-directory", "-o", "build", "run"])
            .arg(format!("PORT={port}"))
            .arg(format!("REDIS_SERVER={}", server_binary()))
            .current_dir(repo())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn make run");
        let run = MakeRun {
            child: Some(child),
            port,
        };
        wait_until(
            &format!("the server of make run on port {port}"),
            || match redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
            {
                Ok(mut conn) => cmd(&mut conn, &["PING"]).is_ok(),
                Err(_) => false,
            },
        );
        run
    }

    fn connect(&self) -> Connection {
        connect_port(self.port, PATIENCE)
    }

    /// Stops the server with SHUTDOWN (it saves its RDB) and returns what
    /// `make run` printed.
    fn stop(mut self) -> String {
        let _ = cmd(&mut self.connect(), &["SHUTDOWN"]);
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        let mut printed = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut printed);
        }
        printed
    }
}

impl Drop for MakeRun {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(mut conn) = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
                .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
            {
                let _ = cmd(&mut conn, &["SHUTDOWN", "NOSAVE"]);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn run_dir(port: u16) -> PathBuf {
    repo().join("target/run").join(port.to_string())
}

#[test]
fn make_run_on_two_ports_keeps_data_apart_and_the_work_tree_clean() {
    let before = work_tree_status();
    let (port_a, port_b) = loop {
        let (a, b) = (free_port(), free_port());
        if a != b {
            break (a, b);
        }
    };
    for port in [port_a, port_b] {
        let _ = std::fs::remove_dir_all(run_dir(port));
    }

    let a = MakeRun::start(port_a);
    let b = MakeRun::start(port_b);
    let mut conn_a = a.connect();
    let mut conn_b = b.connect();
    let held = acquire(&mut conn_a, "shared:x", "owner-a", 600_000).expect("granted on A");
    // The docs' own CONFIG example: it rewrites the server's copy only.
    config_set(&mut conn_a, "dlock.fair-reservation-ms", "2500");
    cmd(&mut conn_a, &["CONFIG", "REWRITE"]).expect("CONFIG REWRITE");
    assert_eq!(
        cmd(&mut conn_b, &["DLOCK.INFO", "shared:x"]).expect("INFO on B"),
        Value::Nil,
        "the server on port B must not see port A's lock"
    );
    acquire(&mut conn_b, "shared:y", "owner-b", 600_000).expect("granted on B");
    drop((conn_a, conn_b));
    let printed_a = a.stop();
    let printed_b = b.stop();

    for (port, printed) in [(port_a, &printed_a), (port_b, &printed_b)] {
        assert!(
            printed.contains(&format!("redis-cli -p {port}")),
            "make run prints how to connect: {printed}"
        );
        assert!(
            printed.contains(&format!("target/run/{port}/")),
            "make run prints where the data lives: {printed}"
        );
        let dir = run_dir(port);
        assert!(
            dir.join("redis.conf").is_file(),
            "{dir:?} has its redis.conf"
        );
        assert!(dir.join("dump.rdb").is_file(), "{dir:?} has its RDB");
        assert!(dir.join("appendonlydir").is_dir(), "{dir:?} has its AOF");
    }
    let conf_a = std::fs::read_to_string(run_dir(port_a).join("redis.conf")).expect("conf A");
    assert!(
        conf_a.contains("dlock.fair-reservation-ms 2500"),
        "CONFIG REWRITE went to the port's copy:\n{conf_a}"
    );

    // A second run on port A finds its lock; B's lock is not there.
    let a = MakeRun::start(port_a);
    let mut conn_a = a.connect();
    assert_eq!(
        info_owner(&mut conn_a, "shared:x").as_deref(),
        Some(&b"owner-a"[..]),
        "the restarted server keeps port A's lock"
    );
    assert_eq!(info_int(&mut conn_a, "shared:x", "token"), held.0);
    assert_eq!(
        cmd(&mut conn_a, &["DLOCK.INFO", "shared:y"]).expect("INFO"),
        Value::Nil,
        "port B's lock must not appear on port A"
    );
    assert_eq!(
        cmd(&mut conn_a, &["CONFIG", "GET", "dlock.fair-reservation-ms"]).expect("CONFIG GET"),
        Value::Array(vec![
            Value::BulkString(b"dlock.fair-reservation-ms".to_vec()),
            Value::BulkString(b"2500".to_vec()),
        ]),
        "the rewritten configuration is used on the next run"
    );
    drop(conn_a);
    let printed = a.stop();
    assert!(printed.contains(&format!("redis-cli -p {port_a}")));

    if let Some(before) = before {
        assert_eq!(
            work_tree_status(),
            Some(before),
            "make run must not write to the work tree"
        );
    }
    for port in [port_a, port_b] {
        let _ = std::fs::remove_dir_all(run_dir(port));
    }
}
