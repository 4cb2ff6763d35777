//! The `dlock` command against real servers: `run` (mutual exclusion, FIFO,
//! exit codes, loss, signals, parent death), `elect` and `observe`, `info`,
//! `list`, `top`, `latch`, passwords and completions. Each test starts its
//! own server on a free port and spawns the built binary.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cmd, Server, Value};
use support::*;

/// Starts `n` `dlock run KEY` processes one after another, each queued
/// before the next starts (the first holds until the file `go` exists),
/// and checks that their children never overlapped and ran in queue order
/// with increasing tokens.
fn queued_children_run_one_at_a_time_in_fifo_order(n: usize) {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    let key = format!("fifo-{n}");
    // Each child logs "start <ns> <token> <id>" and "end <ns> <token> <id>".
    let child_script = "echo \"start $(date +%s%N) $DLOCK_TOKEN $ID\" >> log; \
         if [ \"$ID\" = 0 ]; then while [ ! -e go ]; do sleep 0.01; done; fi; \
         sleep 0.02; \
         echo \"end $(date +%s%N) $DLOCK_TOKEN $ID\" >> log";
    let mut children = Vec::new();
    for id in 0..n {
        let mut command = dlock(&server);
        command
            .current_dir(&scratch.0)
            .env("ID", id.to_string())
            .args(["run", &key, "--ttl", "5s", "--"])
            .args(sh(child_script))
            .stdout(Stdio::null());
        children.push(command.spawn().expect("spawn dlock run"));
        if id == 0 {
            scratch.wait_for_lines("log", 1);
        } else {
            // Queued: the server counts one more waiter.
            eventually("the next dlock to queue", Duration::from_secs(10), || {
                common::info_int(&mut conn, &key, "waiting") == id as i64
            });
        }
    }
    std::fs::write(scratch.path("go"), "").expect("create go");
    for child in &mut children {
        let status = wait_status(child, Duration::from_secs(30));
        assert_eq!(status.code(), Some(0), "every dlock run exits 0");
    }
    let log = scratch.read("log");
    let events: Vec<(String, u128, u64, usize)> = log
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (
                f[0].to_string(),
                f[1].parse().expect("time"),
                f[2].parse().expect("token"),
                f[3].parse().expect("id"),
            )
        })
        .collect();
    assert_eq!(events.len(), 2 * n, "{log}");
    for (i, pair) in events.chunks(2).enumerate() {
        // start/end alternate: no child started while another ran.
        assert_eq!(pair[0].0, "start", "{log}");
        assert_eq!(pair[1].0, "end", "{log}");
        assert_eq!(
            pair[0].3, pair[1].3,
            "a child's end follows its own start: {log}"
        );
        // FIFO: the children ran in the order their dlock queued.
        assert_eq!(pair[0].3, i, "queue order: {log}");
        assert!(pair[0].1 <= pair[1].1);
        if i > 0 {
            let previous = &events[2 * i - 1];
            assert!(previous.1 <= pair[0].1, "overlap: {log}");
            assert!(
                previous.2 < pair[0].2,
                "tokens increase with each holder: {log}"
            );
        }
    }
    assert_eq!(common::info(&mut conn, &key), None, "released at the end");
}

#[test]
fn two_queued_runs_never_overlap() {
    queued_children_run_one_at_a_time_in_fifo_order(2);
}

#[test]
fn eight_queued_runs_never_overlap_and_run_in_fifo_order() {
    queued_children_run_one_at_a_time_in_fifo_order(8);
}

#[test]
fn the_child_gets_the_key_owner_exact_token_and_ttl() {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    let mut child = dlock(&server)
        .current_dir(&scratch.0)
        .args(["run", "env-key", "--ttl", "7s", "--"])
        .args(sh(
            "echo \"$DLOCK_KEY $DLOCK_OWNER $DLOCK_TOKEN $DLOCK_TTL_MS\" > env; \
             while [ ! -e go ]; do sleep 0.01; done",
        ))
        .spawn()
        .expect("spawn");
    let line = scratch.wait_for_lines("env", 1);
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[0], "env-key");
    let owner = common::info_owner(&mut conn, "env-key").expect("held");
    assert_eq!(
        fields[1].as_bytes(),
        owner.as_slice(),
        "DLOCK_OWNER is the holder"
    );
    let token = common::info_int(&mut conn, "env-key", "token");
    assert_eq!(
        fields[2],
        token.to_string(),
        "DLOCK_TOKEN is the exact token"
    );
    assert_eq!(fields[3], "7000");
    let pttl = common::info_int(&mut conn, "env-key", "pttl");
    assert!(pttl > 5000 && pttl <= 7000, "the lease is --ttl: {pttl}");
    std::fs::write(scratch.path("go"), "").expect("go");
    assert_eq!(wait_status(&mut child, PATIENCE_CHILD).code(), Some(0));
    assert_eq!(common::info(&mut conn, "env-key"), None, "released");
}

const PATIENCE_CHILD: Duration = Duration::from_secs(20);

#[test]
fn exit_codes_pass_through_and_a_signal_gives_128_plus_n() {
    let server = Server::start();
    for expected in [0, 3, 255] {
        let out = output(
            dlock(&server)
                .args(["run", "codes", "--"])
                .args(sh(&format!("exit {expected}"))),
        );
        assert_eq!(code_of(&out), expected, "{}", stderr_of(&out));
    }
    let out = output(
        dlock(&server)
            .args(["run", "codes", "--"])
            .args(sh("kill -9 $$")),
    );
    assert_eq!(code_of(&out), 137, "SIGKILL: 128 + 9");
    // The command may also follow the key without `--`.
    let out = output(dlock(&server).args(["run", "codes", "sh", "-c", "exit 4"]));
    assert_eq!(code_of(&out), 4);
    let out = output(dlock(&server).args(["run", "codes", "--", "/nonexistent/program"]));
    assert_eq!(code_of(&out), 127);
    assert!(
        stderr_of(&out).contains("command not found"),
        "{}",
        stderr_of(&out)
    );
    let mut conn = server.connect();
    assert_eq!(
        common::info(&mut conn, "codes"),
        None,
        "released after every run"
    );
}

#[test]
fn not_acquired_gives_75_at_once_with_no_wait_and_after_the_wait_otherwise() {
    let server = Server::start();
    let mut conn = server.connect();
    common::acquire(&mut conn, "busy", "someone-else", 60_000).expect("granted");
    let blocked_before = blocked_timeouts(&mut conn);
    // The fastest of three runs (a loaded machine may pause any one).
    let mut fastest = Duration::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        let out = output(dlock(&server).args(["run", "busy", "--no-wait", "--", "true"]));
        fastest = fastest.min(started.elapsed());
        assert_eq!(code_of(&out), 75, "{}", stderr_of(&out));
    }
    assert!(
        fastest < Duration::from_millis(200),
        "--no-wait took {fastest:?}"
    );
    assert_eq!(
        blocked_timeouts(&mut conn),
        blocked_before,
        "--no-wait never blocks"
    );

    let started = Instant::now();
    let out = output(dlock(&server).args(["run", "busy", "--wait", "1s", "--", "true"]));
    let waited = started.elapsed();
    assert_eq!(code_of(&out), 75);
    assert!(
        waited >= Duration::from_millis(950) && waited < Duration::from_secs(3),
        "--wait 1s returned after {waited:?}"
    );
    assert_eq!(
        blocked_timeouts(&mut conn),
        blocked_before + 1,
        "it waited in the queue"
    );

    let out = output(dlock(&server).args([
        "run",
        "busy",
        "--no-wait",
        "--conflict-exit-code",
        "9",
        "--",
        "true",
    ]));
    assert_eq!(code_of(&out), 9);
    let out = output(dlock(&server).args(["run", "busy", "--no-wait", "-E", "0", "--", "false"]));
    assert_eq!(
        code_of(&out),
        0,
        "-E 0: a busy lock is no failure (and the command never ran)"
    );
    assert_eq!(
        common::info_owner(&mut conn, "busy").as_deref(),
        Some(&b"someone-else"[..])
    );
}

fn blocked_timeouts(conn: &mut common::Connection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("dlock")
        .query(conn)
        .expect("INFO dlock");
    info.lines()
        .find_map(|line| line.strip_prefix("dlock_block_timeouts:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("dlock_block_timeouts")
}

#[test]
fn fair_keeps_the_place_of_an_owner_that_polls() {
    let server = Server::start();
    let mut conn = server.connect();
    common::acquire(&mut conn, "report", "alice", 60_000).expect("granted");
    let poll = |owner: &str| {
        let out = output(
            dlock(&server)
                .args([
                    "run",
                    "report",
                    "--no-wait",
                    "--fair",
                    "--owner",
                    owner,
                    "--",
                ])
                .args(sh("echo \"$DLOCK_OWNER\"")),
        );
        (code_of(&out), stdout_of(&out))
    };
    assert_eq!(poll("host-b").0, 75, "held by alice");
    let queue = common::info(&mut conn, "report").expect("the lock");
    let queue = &queue
        .iter()
        .find(|(name, _)| name == "queue")
        .expect("queue")
        .1;
    assert_eq!(
        *queue,
        Value::Array(vec![Value::BulkString(b"host-b".to_vec())]),
        "a reservation"
    );
    cmd(&mut conn, &["DLOCK.RELEASE", "report", "alice"]).expect("release");
    // Free, but host-b's reservation heads the queue: another owner waits.
    assert_eq!(poll("host-c").0, 75);
    assert_eq!(
        poll("host-b"),
        (0, "host-b\n".to_string()),
        "its place was kept"
    );
}

#[test]
fn a_server_that_cannot_be_reached_or_refuses_gives_69() {
    // Nothing listens on a port just freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out = output(
        Command::new(DLOCK)
            .env("DLOCK_URL", format!("redis://127.0.0.1:{port}/"))
            .args(["run", "k", "--", "true"]),
    );
    assert_eq!(code_of(&out), 69);
    let err = stderr_of(&out);
    assert!(
        err.contains("cannot reach the server at redis://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("check --url, DLOCK_URL"), "{err}");

    // rediss:// goes to the client as it is: without TLS in this build it
    // says so, with it the TLS connection fails; either way before the
    // command starts.
    let out = output(
        Command::new(DLOCK)
            .env("DLOCK_URL", format!("rediss://127.0.0.1:{port}/"))
            .args(["run", "k", "--", "true"]),
    );
    assert_eq!(code_of(&out), 69, "{}", stderr_of(&out));

    let plain = Server::without_module(&[]);
    let out = output(dlock(&plain).args(["run", "k", "--", "true"]));
    assert_eq!(code_of(&out), 69);
    assert!(
        stderr_of(&out)
            .contains("has no DLOCK commands: load the module (loadmodule .../libdlock.so"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn a_password_comes_from_rediscli_auth_or_the_url() {
    let server = Server::start();
    let mut conn = server.connect();
    cmd(&mut conn, &["CONFIG", "SET", "requirepass", "s3cret"]).expect("set a password");
    let out = output(dlock(&server).args(["run", "k", "--", "true"]));
    assert_eq!(code_of(&out), 69);
    assert!(
        stderr_of(&out).contains("needs a password (NOAUTH)"),
        "{}",
        stderr_of(&out)
    );
    assert!(stderr_of(&out).contains("REDISCLI_AUTH"));
    let out = output(
        dlock(&server)
            .env("REDISCLI_AUTH", "s3cret")
            .args(["run", "k", "--", "true"]),
    );
    assert_eq!(code_of(&out), 0, "{}", stderr_of(&out));
    let out = output(
        dlock(&server)
            .env(
                "DLOCK_URL",
                format!("redis://:wrong@127.0.0.1:{}/", server.port),
            )
            .args(["run", "k", "--", "true"]),
    );
    assert_eq!(code_of(&out), 69);
    let err = stderr_of(&out);
    assert!(err.contains("WRONGPASS"), "{err}");
    assert!(
        !err.contains("wrong"),
        "the password is never printed: {err}"
    );
    // Leave the server as the harness found it (it stops it without auth).
    cmd(&mut conn, &["CONFIG", "SET", "requirepass", ""]).expect("drop the password");
}

#[test]
fn usage_errors_give_64() {
    let server = Server::start();
    let cases: &[(&[&str], &str)] = &[
        (&["run"], "KEY"),
        (&["run", "k"], "COMMAND"),
        (&["run", "k", "--ttl", "30", "--", "true"], "no unit"),
        (&["run", "k", "--wait", "5x", "--", "true"], "unknown unit"),
        (&["run", "k", "--weight", "2", "--", "true"], "--limit"),
        (
            &["run", "k", "--no-wait", "--wait", "1s", "--", "true"],
            "cannot be used with",
        ),
        (
            &["run", "k", "--kill-signal", "NOPE", "--", "true"],
            "not a signal",
        ),
        (&["run", "k", "--ttl", "0", "--", "true"], "at least 1ms"),
        (&["bogus"], "unrecognized subcommand"),
        (&[], "Usage: dlock"),
        (
            &[
                "--sentinel",
                "redis://127.0.0.1:1/",
                "run",
                "k",
                "--",
                "true",
            ],
            "--master",
        ),
        (&["latch", "l", "init", "0"], "0"),
    ];
    for (args, says) in cases {
        let out = output(dlock(&server).args(*args));
        assert_eq!(code_of(&out), 64, "{args:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains(says),
            "{args:?} should say {says:?}: {}",
            stderr_of(&out)
        );
    }
    let out = output(dlock(&server).args(["run", "--help"]));
    assert_eq!(code_of(&out), 0);
    let help = stdout_of(&out);
    for needle in [
        "Examples:",
        "Exit codes:",
        "75",
        "76",
        "69",
        "64",
        "DLOCK_TOKEN",
    ] {
        assert!(help.contains(needle), "run --help lacks {needle}");
    }
}

/// A child that logs its pid and SIGTERM, then waits.
const TRAPPING_CHILD: &str = "trap 'echo \"term $(date +%s%N)\" >> log; exit 0' TERM; \
     echo \"pid $$\" >> log; while :; do sleep 0.02; done";

#[test]
fn deleting_the_key_stops_the_child_within_a_renewal_period_and_exits_76() {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    // Renewal every 500 ms.
    let child = dlock(&server)
        .current_dir(&scratch.0)
        .args(["run", "lose-me", "--ttl", "1500ms", "--"])
        .args(sh(TRAPPING_CHILD))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    scratch.wait_for_lines("log", 1);
    let deleted_at = now_ns();
    cmd(&mut conn, &["DEL", "lose-me"]).expect("DEL");
    let out = wait_output(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(76), "{}", stderr_of(&out));
    let log = scratch.read("log");
    let term_at: u128 = log
        .lines()
        .find_map(|l| l.strip_prefix("term "))
        .unwrap_or_else(|| panic!("the child never got SIGTERM: {log}"))
        .parse()
        .expect("time");
    let after = Duration::from_nanos((term_at.saturating_sub(deleted_at)) as u64);
    assert!(
        after <= Duration::from_millis(500 + 500),
        "SIGTERM came {after:?} after the DEL (renewal period 500 ms)"
    );
    assert!(stderr_of(&out).contains("was lost"), "{}", stderr_of(&out));
}

#[test]
fn a_child_that_ignores_the_kill_signal_gets_sigkill_after_kill_after() {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    let child = dlock(&server)
        .current_dir(&scratch.0)
        .args([
            "run",
            "stubborn",
            "--ttl",
            "600ms",
            "--kill-signal",
            "USR1",
            "--kill-after",
            "400ms",
            "--",
        ])
        .args(sh("trap 'echo \"usr1 $(date +%s%N)\" >> log' USR1; \
                  echo \"pid $$\" >> log; while :; do sleep 0.02; done"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let log = scratch.wait_for_lines("log", 1);
    let pid: i32 = log
        .trim()
        .strip_prefix("pid ")
        .expect("pid line")
        .parse()
        .expect("pid");
    cmd(&mut conn, &["DEL", "stubborn"]).expect("DEL");
    let out = wait_output(child, Duration::from_secs(20));
    let exited_at = now_ns();
    assert_eq!(out.status.code(), Some(76), "{}", stderr_of(&out));
    let log = scratch.read("log");
    let signalled_at: u128 = log
        .lines()
        .find_map(|l| l.strip_prefix("usr1 "))
        .unwrap_or_else(|| panic!("the child never got --kill-signal: {log}"))
        .parse()
        .expect("time");
    let grace = Duration::from_nanos((exited_at - signalled_at) as u64);
    assert!(
        grace >= Duration::from_millis(380),
        "SIGKILL came only {grace:?} after USR1"
    );
    assert!(
        stderr_of(&out).contains("sending SIGKILL"),
        "{}",
        stderr_of(&out)
    );
    assert!(!alive(pid), "the child is gone (killed and reaped)");
}

#[test]
fn sigterm_to_dlock_reaches_the_child_and_the_lock_is_released_after_it_exits() {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    let mut child = dlock(&server)
        .current_dir(&scratch.0)
        .args(["run", "forward", "--"])
        .args(sh(
            "trap 'echo \"term $DLOCK_TOKEN\" >> log; sleep 0.2; echo done >> log; exit 5' TERM; \
                  echo started >> log; while :; do sleep 0.02; done",
        ))
        .spawn()
        .expect("spawn");
    scratch.wait_for_lines("log", 1);
    send_signal(child.id(), libc::SIGTERM);
    let status = wait_status(&mut child, PATIENCE_CHILD);
    assert_eq!(status.code(), Some(5), "dlock exits with the child's code");
    let log = scratch.read("log");
    assert!(log.contains("term "), "the child got SIGTERM: {log}");
    assert!(
        log.contains("done"),
        "dlock waited for the child to finish: {log}"
    );
    assert_eq!(
        common::info(&mut conn, "forward"),
        None,
        "DLOCK.INFO shows no hold"
    );
}

#[test]
fn kill_9_of_dlock_kills_the_child_and_the_lease_ends_within_the_ttl() {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    let mut child = dlock(&server)
        .current_dir(&scratch.0)
        .args(["run", "orphan", "--ttl", "1s", "--"])
        .args(sh("echo \"pid $$\" >> log; while :; do sleep 0.02; done"))
        .spawn()
        .expect("spawn");
    let log = scratch.wait_for_lines("log", 1);
    let pid: i32 = log
        .trim()
        .strip_prefix("pid ")
        .expect("pid")
        .parse()
        .expect("pid");
    assert!(common::info_owner(&mut conn, "orphan").is_some());
    let killed = Instant::now();
    child.kill().expect("SIGKILL dlock");
    child.wait().expect("reap dlock");
    // Both watched in one loop: when the child died, when the lease ended.
    let (mut child_gone, mut lease_gone) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child_gone.is_none() || lease_gone.is_none() {
        assert!(
            Instant::now() < deadline,
            "child gone {child_gone:?}, lease gone {lease_gone:?}"
        );
        if child_gone.is_none() && !alive(pid) {
            child_gone = Some(killed.elapsed());
        }
        if lease_gone.is_none() && common::info(&mut conn, "orphan").is_none() {
            lease_gone = Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let lease_gone = lease_gone.expect("measured");
    assert!(
        lease_gone <= Duration::from_millis(1000 + 200),
        "the lease ended {lease_gone:?} after the kill (ttl 1 s)"
    );
}

#[test]
fn shared_holds_and_semaphore_permits() {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    let hold = "echo in >> log; while [ ! -e go ]; do sleep 0.01; done";
    let mut readers = Vec::new();
    for _ in 0..2 {
        readers.push(
            dlock(&server)
                .current_dir(&scratch.0)
                .args(["run", "rw", "--shared", "--"])
                .args(sh(hold))
                .spawn()
                .expect("spawn"),
        );
    }
    scratch.wait_for_lines("log", 2);
    assert_eq!(
        common::info_int(&mut conn, "rw", "shared"),
        2,
        "two readers at once"
    );
    let out = output(dlock(&server).args(["run", "rw", "--no-wait", "--", "true"]));
    assert_eq!(code_of(&out), 75, "a writer waits for the readers");
    std::fs::write(scratch.path("go"), "").expect("go");
    for reader in &mut readers {
        assert_eq!(wait_status(reader, PATIENCE_CHILD).code(), Some(0));
    }
    // A semaphore of 3 permits: a hold of weight 2 leaves room for 1.
    let _ = std::fs::remove_file(scratch.path("go"));
    let mut heavy = dlock(&server)
        .current_dir(&scratch.0)
        .args(["run", "pool", "--limit", "3", "--weight", "2", "--"])
        .args(sh(
            "echo heavy >> log2; while [ ! -e go ]; do sleep 0.01; done",
        ))
        .spawn()
        .expect("spawn");
    scratch.wait_for_lines("log2", 1);
    let out = output(dlock(&server).args([
        "run",
        "pool",
        "--limit",
        "3",
        "--weight",
        "2",
        "--no-wait",
        "--",
        "true",
    ]));
    assert_eq!(code_of(&out), 75, "2 + 2 > 3");
    let out =
        output(dlock(&server).args(["run", "pool", "--limit", "3", "--no-wait", "--", "true"]));
    assert_eq!(code_of(&out), 0, "2 + 1 <= 3");
    std::fs::write(scratch.path("go"), "").expect("go");
    assert_eq!(wait_status(&mut heavy, PATIENCE_CHILD).code(), Some(0));
}

#[test]
fn elect_runs_the_second_candidates_command_only_after_the_first_leader_dies() {
    let server = Server::start();
    let mut conn = server.connect();
    let scratch = Scratch::new();
    let candidate = |value: &str| {
        dlock(&server)
            .current_dir(&scratch.0)
            .args(["elect", "leader", "--value", value, "--ttl", "1s", "--"])
            .args(sh("echo \"$DLOCK_OWNER $DLOCK_TOKEN $(date +%s%N)\" >> log; while :; do sleep 0.02; done"))
            .spawn()
            .expect("spawn elect")
    };
    let mut first = candidate("host-a");
    let log = scratch.wait_for_lines("log", 1);
    assert!(log.starts_with("host-a#"), "{log}");
    // The observer's first line is the leader now.
    let mut observer = dlock(&server)
        .args(["observe", "leader"])
        .stdout(std::fs::File::create(scratch.path("observed")).expect("observed"))
        .spawn()
        .expect("spawn observe");
    scratch.wait_for_lines("observed", 1);
    let mut second = candidate("host-b");
    eventually(
        "the second candidate to queue",
        Duration::from_secs(10),
        || common::info_int(&mut conn, "leader", "waiting") == 1,
    );
    assert_eq!(
        scratch.read("log").lines().count(),
        1,
        "one leader at a time"
    );
    let killed_at = now_ns();
    first.kill().expect("SIGKILL the first leader's dlock");
    first.wait().expect("reap");
    let log = scratch.wait_for_lines("log", 2);
    let lines: Vec<Vec<&str>> = log
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(lines[1][0].starts_with("host-b#"), "{log}");
    let started_at: u128 = lines[1][2].parse().expect("time");
    assert!(started_at > killed_at, "the second started after the kill");
    let after = Duration::from_nanos((started_at - killed_at) as u64);
    assert!(
        after <= Duration::from_millis(1000 + 500),
        "took over {after:?} after the kill (ttl 1 s)"
    );
    let term_a: u64 = lines[0][1].parse().expect("term");
    let term_b: u64 = lines[1][1].parse().expect("term");
    assert!(term_b > term_a);
    // The observer: who led at first, then every change, in order (the
    // key may be free for a moment between the two terms: "none").
    second.kill().expect("kill the second");
    second.wait().expect("reap");
    eventually(
        "the observer to see the end of the second term",
        Duration::from_secs(10),
        || {
            let seen = scratch.read("observed");
            seen.contains("host-b ") && seen.ends_with("none\n")
        },
    );
    observer.kill().expect("stop the observer");
    observer.wait().expect("reap");
    let seen = scratch.read("observed");
    let seen: Vec<&str> = seen.lines().collect();
    let leaders: Vec<&&str> = seen.iter().filter(|l| **l != "none").collect();
    assert_eq!(
        leaders,
        [
            &format!("host-a {term_a}").as_str(),
            &format!("host-b {term_b}").as_str()
        ],
        "{seen:?}"
    );
    assert_eq!(seen[0], format!("host-a {term_a}"), "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] != w[1]),
        "one line per change: {seen:?}"
    );
}

#[test]
fn elect_without_a_command_prints_the_value_and_resigns_on_sigterm() {
    let server = Server::start();
    let mut conn = server.connect();
    let mut leader = dlock(&server)
        .args(["elect", "solo", "--value", "me-1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = leader.stdout.take().expect("stdout");
    let mut printed = [0u8; 5];
    stdout.read_exact(&mut printed).expect("the value");
    assert_eq!(&printed, b"me-1\n");
    let owner = common::info_owner(&mut conn, "solo").expect("leading");
    assert!(owner.starts_with(b"me-1#"));
    send_signal(leader.id(), libc::SIGTERM);
    assert_eq!(wait_status(&mut leader, PATIENCE_CHILD).code(), Some(0));
    assert_eq!(common::info(&mut conn, "solo"), None, "resigned");
    // Deleting the key of a leader without a command: 76.
    let leader = dlock(&server)
        .args(["elect", "solo", "--value", "me-2", "--ttl", "600ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    eventually("the leader to lead", Duration::from_secs(10), || {
        common::info_owner(&mut conn, "solo").is_some()
    });
    cmd(&mut conn, &["DEL", "solo"]).expect("DEL");
    let out = wait_output(leader, Duration::from_secs(20));
    assert_eq!(code_of(&out), 76, "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("leadership of solo was lost"));
}

#[test]
fn observe_prints_json_and_none() {
    let server = Server::start();
    let mut conn = server.connect();
    let out = output(dlock(&server).args(["observe", "nobody", "--json", "--count", "1"]));
    assert_eq!(stdout_of(&out), "{\"leader\":null,\"term\":0}\n");
    let (token, _, _) = common::acquire(&mut conn, "e", "host-z#0123", 30_000).expect("granted");
    let out = output(dlock(&server).args(["observe", "e", "--json", "--count", "1"]));
    let parsed: serde_json::Value = serde_json::from_str(stdout_of(&out).trim()).expect("JSON");
    assert_eq!(parsed["leader"], "host-z");
    assert_eq!(parsed["term"].as_u64(), Some(token as u64));
    assert_eq!(parsed["owner"], "host-z#0123");
}

/// Locks with known holders and waiters, a latch and a string.
fn known_locks(conn: &mut common::Connection) -> (i64, i64, i64) {
    let (orders, _, _) = common::acquire(conn, "orders:42", "worker-a", 60_000).expect("granted");
    assert_eq!(
        cmd(conn, &["DLOCK.FAIR", "orders:42", "worker-b", "60000"]).expect("FAIR"),
        Value::Nil
    );
    let r1 = common::grant(
        cmd(conn, &["DLOCK.ACQUIRE", "catalog", "r1", "60000", "SHARED"]).expect("r1"),
    )
    .expect("granted")
    .0;
    let r2 = common::grant(
        cmd(conn, &["DLOCK.ACQUIRE", "catalog", "r2", "60000", "SHARED"]).expect("r2"),
    )
    .expect("granted")
    .0;
    cmd(conn, &["DLOCK.LATCH", "batch:7", "3", "60000"]).expect("LATCH");
    cmd(conn, &["SET", "plain", "x"]).expect("SET");
    (orders, r1, r2)
}

/// Replaces each whole word of `text` matched by `is_variable` with `#`,
/// after checking it with `check`: the exact shape of an output whose
/// lease columns change from run to run.
fn masked(text: &str, column: usize, check: impl Fn(&str)) -> String {
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            if i == 0 {
                return line.to_string();
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(word) = words.get(column) else {
                return line.to_string();
            };
            if *word == "-" {
                return line.to_string();
            }
            check(word);
            let at = nth_word_start(line, column);
            format!(
                "{}{}{}",
                &line[..at],
                "#".repeat(word.len()),
                &line[at + word.len()..]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn nth_word_start(line: &str, n: usize) -> usize {
    let mut count = 0;
    let mut in_word = false;
    for (i, c) in line.char_indices() {
        if c.is_whitespace() {
            in_word = false;
        } else if !in_word {
            if count == n {
                return i;
            }
            count += 1;
            in_word = true;
        }
    }
    line.len()
}

fn lease_ms(word: &str) {
    let ms: i64 = word
        .parse()
        .unwrap_or_else(|_| panic!("not a lease: {word}"));
    assert!((50_000..=60_000).contains(&ms), "lease left {ms}");
}

#[test]
fn list_and_info_print_the_known_locks_exactly() {
    let server = Server::start();
    let mut conn = server.connect();
    let (orders, r1, r2) = known_locks(&mut conn);
    let out = output(dlock(&server).args(["list"]));
    assert_eq!(code_of(&out), 0, "{}", stderr_of(&out));
    let text = stdout_of(&out);
    let shape = masked(&text, 4, lease_ms);
    assert_eq!(
        shape,
        "KEY        TYPE      HOLDERS  WAITING  LEASE_MS\n\
         batch:7    latch(3)  -        0        #####\n\
         catalog    lock      2        0        #####\n\
         orders:42  lock      1        1        #####",
        "{text}"
    );
    let out = output(dlock(&server).args(["list", "orders:*"]));
    assert_eq!(
        stdout_of(&out).lines().count(),
        2,
        "a pattern: {}",
        stdout_of(&out)
    );

    let out = output(dlock(&server).args(["list", "--json"]));
    let list: serde_json::Value = serde_json::from_str(&stdout_of(&out)).expect("JSON");
    let list = list.as_array().expect("an array");
    assert_eq!(list.len(), 3);
    assert_eq!(list[0]["key"], "batch:7");
    assert_eq!(list[0]["type"], "latch");
    assert_eq!(list[0]["count"], 3);
    assert_eq!(list[1]["key"], "catalog");
    assert_eq!(list[1]["holders"], serde_json::json!(["r1", "r2"]));
    assert_eq!(list[2]["key"], "orders:42");
    assert_eq!(list[2]["holders"], serde_json::json!(["worker-a"]));
    assert_eq!(list[2]["waiting"], 1);

    let out = output(dlock(&server).args(["info", "orders:42"]));
    let text = stdout_of(&out);
    let pttl_line = |text: &str| -> String {
        text.lines()
            .map(|line| match line.strip_prefix("pttl     ") {
                Some(ms) => {
                    lease_ms(ms);
                    "pttl     #".to_string()
                }
                None => match line.find(" pttl=") {
                    Some(at) => {
                        let rest = &line[at + 6..];
                        let end = rest.find(' ').unwrap_or(rest.len());
                        lease_ms(&rest[..end]);
                        format!("{} pttl=#{}", &line[..at], &rest[end..])
                    }
                    None => line.to_string(),
                },
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        pttl_line(&text),
        format!(
            "key      orders:42\n\
             type     lock\n\
             owner    worker-a\n\
             holds    1\n\
             token    {orders}\n\
             pttl     #\n\
             waiting  1\n\
             queue    worker-b\n\
             shared   0\n\
             holders  1\n  \
             worker-a exclusive=1 shared=0 token={orders} pttl=# weight=1"
        )
    );
    let out = output(dlock(&server).args(["info", "catalog", "--json"]));
    let info: serde_json::Value = serde_json::from_str(&stdout_of(&out)).expect("JSON");
    assert_eq!(info["type"], "lock");
    assert_eq!(info["owner"], serde_json::Value::Null);
    assert_eq!(info["shared"], 2);
    assert_eq!(info["holders"][0]["owner"], "r1");
    assert_eq!(info["holders"][0]["token"].as_i64(), Some(r1));
    assert_eq!(info["holders"][1]["token"].as_i64(), Some(r2));
    let out = output(dlock(&server).args(["info", "batch:7"]));
    assert!(
        stdout_of(&out).starts_with("key      batch:7\ntype     latch\ncount    3\n"),
        "{}",
        stdout_of(&out)
    );
    let out = output(dlock(&server).args(["info", "missing", "--json"]));
    assert_eq!(stdout_of(&out), "null\n");
    let out = output(dlock(&server).args(["info", "plain"]));
    assert_eq!(code_of(&out), 69);
    assert!(stderr_of(&out).contains("plain at") && stderr_of(&out).contains("holds another type"));
}

#[test]
fn top_once_shows_the_hottest_lock_first() {
    let server = Server::start();
    let mut conn = server.connect();
    known_locks(&mut conn);
    let out = output(dlock(&server).args(["top", "--once", "--interval", "100ms"]));
    assert_eq!(code_of(&out), 0, "{}", stderr_of(&out));
    let text = stdout_of(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "dlock top  redis://127.0.0.1:{}/  locks 2  grants/s 0.0  handoffs/s 0.0  expiries/s 0.0  blocked 0",
            server.port
        )
    );
    assert_eq!(lines[1], "");
    let table = lines[2..].join("\n");
    let held = |word: &str| {
        let seconds: f64 = word.parse().expect("seconds");
        assert!((0.0..30.0).contains(&seconds), "held {seconds}");
    };
    let shape = masked(&masked(&table, 3, held), 4, lease_ms);
    assert_eq!(
        shape,
        "KEY        WAITING  HOLDERS  HELD_S  LEASE_MS  OWNER\n\
         orders:42  1        1        ###     #####     worker-a\n\
         catalog    0        2        ###     #####     2 shared",
        "{text}"
    );
}

#[test]
fn top_in_a_terminal_shows_the_hottest_lock_first() {
    let server = Server::start();
    let mut conn = server.connect();
    known_locks(&mut conn);
    let (mut master, slave) = open_pty(40, 120);
    let mut child = dlock(&server)
        .args(["top", "--interval", "200ms"])
        .stdin(Stdio::null())
        .stdout(slave)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn top");
    // Read the screen until two frames have arrived (the second with rates).
    let mut screen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buffer = [0u8; 4096];
    // Each frame starts with ESC[H and ends with ESC[J.
    while screen.windows(3).filter(|w| w == b"\x1b[J").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "top drew nothing: {:?}",
            String::from_utf8_lossy(&screen)
        );
        match master.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => screen.extend_from_slice(&buffer[..n]),
        }
    }
    send_signal(child.id(), libc::SIGINT);
    assert_eq!(wait_status(&mut child, PATIENCE_CHILD).code(), Some(0));
    let text = String::from_utf8_lossy(&screen).into_owned();
    assert!(
        text.starts_with("\x1b[?1049h"),
        "the alternate screen: {text:?}"
    );
    let last = text.rsplit("\x1b[H").next().expect("a frame");
    let rows: Vec<String> = last
        .split('\n')
        .map(|line| {
            line.replace("\x1b[K", "")
                .replace("\x1b[J", "")
                .trim_end_matches('\r')
                .to_string()
        })
        .collect();
    assert!(rows[0].contains("grants/s 0.0"), "{rows:?}");
    assert!(rows[2].starts_with("KEY "), "{rows:?}");
    assert!(
        rows[3].starts_with("orders:42 "),
        "the hottest lock first: {rows:?}"
    );
    assert!(rows[4].starts_with("catalog "), "{rows:?}");
}

/// A pseudo-terminal of `rows` x `cols`: the master (to read) and the slave
/// (the child's stdout).
fn open_pty(rows: u16, cols: u16) -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut master = 0;
    let mut slave = 0;
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors into the integers we pass; the
    // name pointer may be null; the termios and winsize are read only.
    let result = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(result, 0, "openpty");
    // SAFETY: both descriptors are new and owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    }
}

#[test]
fn a_latch_for_scripts() {
    let server = Server::start();
    let out = output(dlock(&server).args(["latch", "gate", "init", "2", "--ttl", "1m"]));
    assert_eq!(code_of(&out), 0, "{}", stderr_of(&out));
    let out = output(dlock(&server).args(["latch", "gate", "init", "5"]));
    assert_eq!(code_of(&out), 0);
    assert!(stderr_of(&out).contains("exists already"));
    let out = output(dlock(&server).args(["latch", "gate", "count-down"]));
    assert_eq!(stdout_of(&out), "1\n", "the count left");
    let started = Instant::now();
    let out = output(dlock(&server).args(["latch", "gate", "wait", "--wait", "300ms"]));
    assert_eq!(code_of(&out), 75, "still closed");
    assert!(started.elapsed() >= Duration::from_millis(290));
    let waiter = dlock(&server)
        .args(["latch", "gate", "wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wait");
    let mut conn = server.connect();
    eventually("the waiter to wait", Duration::from_secs(10), || {
        common::info_int(&mut conn, "gate", "waiting") == 1
    });
    let out = output(dlock(&server).args(["latch", "gate", "count-down", "1"]));
    assert_eq!(stdout_of(&out), "0\n");
    assert_eq!(
        wait_output(waiter, Duration::from_secs(10)).status.code(),
        Some(0),
        "opened"
    );
    // A latch that ends without opening: 76.
    output(dlock(&server).args(["latch", "short", "init", "1", "--ttl", "300ms"]));
    let out = output(dlock(&server).args(["latch", "short", "wait", "--wait", "10s"]));
    assert_eq!(code_of(&out), 76, "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("disappeared without opening"));
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let out = output(Command::new(DLOCK).args(["completions", shell]));
        assert_eq!(code_of(&out), 0);
        let script = stdout_of(&out);
        for word in [
            "dlock",
            "run",
            "elect",
            "observe",
            "latch",
            "no-wait",
            "kill-after",
        ] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    let out = output(Command::new(DLOCK).args(["completions", "bash"]));
    let check = Command::new("bash")
        .args(["-n", "-c", &stdout_of(&out)])
        .status()
        .expect("bash -n");
    assert!(check.success(), "the bash script parses");
}

/// Three masters, slots split evenly (`redis-cli --cluster create`).
fn start_cluster() -> Vec<Server> {
    // Redis's default node timeout (15 s): no failover happens here.
    let nodes: Vec<Server> = (0..3).map(|_| Server::cluster_node("15000")).collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stdout)
    );
    for node in &nodes {
        let mut conn = node.connect();
        eventually("the cluster to be ok", Duration::from_secs(20), || {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut conn)
                .unwrap_or_default();
            info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
        });
    }
    nodes
}

#[test]
fn in_a_cluster_run_follows_each_key_and_list_scans_every_master() {
    let nodes = start_cluster();
    let seeds: Vec<String> = nodes
        .iter()
        .take(2)
        .flat_map(|n| ["--cluster".to_string(), url_of(n)])
        .collect();
    // "a", "b" and "c" hash to slots 15495, 3300 and 7365: one per master.
    // dlock run a -- dlock run b -- dlock run c -- dlock list
    let mut args: Vec<String> = Vec::new();
    for key in ["a", "b", "c"] {
        args.extend(seeds.iter().cloned());
        args.extend([
            "run".to_string(),
            key.to_string(),
            "--".to_string(),
            DLOCK.to_string(),
        ]);
    }
    args.extend(seeds.iter().cloned());
    args.push("list".to_string());
    let mut command = Command::new(DLOCK);
    command
        .env_remove("DLOCK_URL")
        .env_remove("REDISCLI_AUTH")
        .args(args);
    let out = output(&mut command);
    assert_eq!(code_of(&out), 0, "{}", stderr_of(&out));
    let listed: Vec<String> = stdout_of(&out)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert_eq!(listed, ["a", "b", "c"], "{}", stdout_of(&out));
    // Each key was held on its own master.
    let mut holders = 0;
    for node in &nodes {
        let mut conn = node.connect();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
        assert!(keys.is_empty(), "released everywhere: {keys:?}");
        let info: String = redis::cmd("INFO")
            .arg("dlock")
            .query(&mut conn)
            .expect("INFO");
        if info.contains("dlock_acquires:1") {
            holders += 1;
        }
    }
    assert_eq!(holders, 3, "one lock on each master");
}

/// A Sentinel process watching `master` as "mymaster", stopped on drop.
struct Sentinel {
    child: std::process::Child,
    port: u16,
    _scratch: Scratch,
}

impl Sentinel {
    fn start(master: &Server) -> Sentinel {
        let scratch = Scratch::new();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let conf = scratch.path("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor mymaster 127.0.0.1 {} 1\n",
                scratch.0.display(),
                master.port
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new(common::server_binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a Sentinel");
        let sentinel = Sentinel {
            child,
            port,
            _scratch: scratch,
        };
        eventually(
            "the Sentinel to know the master",
            Duration::from_secs(20),
            || {
                redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| {
                        redis::cmd("SENTINEL")
                            .arg("GET-MASTER-ADDR-BY-NAME")
                            .arg("mymaster")
                            .query::<Option<(String, u16)>>(&mut c)
                    })
                    .is_ok_and(|addr| addr.is_some())
            },
        );
        sentinel
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn with_sentinel_the_lock_goes_to_the_master_it_names() {
    let master = Server::start();
    let sentinel = Sentinel::start(&master);
    let sentinel_url = format!("redis://127.0.0.1:{}/", sentinel.port);
    let out = output(
        Command::new(DLOCK)
            .env_remove("DLOCK_URL")
            .args([
                "--sentinel",
                &sentinel_url,
                "--master",
                "mymaster",
                "run",
                "via-sentinel",
                "--",
            ])
            .args(sh("echo \"$DLOCK_KEY $DLOCK_TOKEN\"")),
    );
    assert_eq!(code_of(&out), 0, "{}", stderr_of(&out));
    assert!(
        stdout_of(&out).starts_with("via-sentinel "),
        "{}",
        stdout_of(&out)
    );
    let mut conn = master.connect();
    let info: String = redis::cmd("INFO")
        .arg("dlock")
        .query(&mut conn)
        .expect("INFO");
    assert!(
        info.contains("dlock_acquires:1"),
        "the master granted it: {info}"
    );
    let out = output(Command::new(DLOCK).env_remove("DLOCK_URL").args([
        "--sentinel",
        &sentinel_url,
        "--master",
        "nosuch",
        "run",
        "k",
        "--",
        "true",
    ]));
    assert_eq!(code_of(&out), 69);
    assert!(
        stderr_of(&out).contains("knows no master named 'nosuch'"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn run_connects_over_tls_with_a_rediss_url() {
    // A TLS-only server (port 0), its test CA trusted the way a user adds
    // one to the system's store without changing it: SSL_CERT_FILE.
    let Some(server) = Server::with_tls(&[]) else {
        eprintln!("skipped: {} has no TLS built in", common::server_binary());
        return;
    };
    let out = output(
        Command::new(DLOCK)
            .env("DLOCK_URL", format!("rediss://127.0.0.1:{}/", server.port))
            .env(
                "SSL_CERT_FILE",
                server.tls.as_ref().expect("a TLS server").join("ca.crt"),
            )
            .args(["run", "tls", "--", "sh", "-c", "echo \"$DLOCK_TOKEN\""]),
    );
    assert_eq!(code_of(&out), 0, "{}", stderr_of(&out));
    let token: u64 = stdout_of(&out)
        .trim()
        .parse()
        .expect("the child printed its token");
    assert!(token > 0);
}

/// The commands of [`stalled_commands_exit_69_by_their_bounds`]: a run
/// and a latch wait with `--wait 1s`, bounded by the wait plus the 2 s
/// margin (plus slack for a loaded machine: 4.5 s), and an election and a
/// latch wait without end, whose connecting is bounded by the connect
/// timeout (5 s) plus the margin.
const STALLED_COMMANDS: [(&[&str], Duration); 4] = [
    (
        &["run", "held", "--wait", "1s", "--", "true"],
        Duration::from_millis(4_500),
    ),
    (
        &["latch", "gate", "wait", "--wait", "1s"],
        Duration::from_millis(4_500),
    ),
    (&["latch", "gate", "wait"], Duration::from_secs(7)),
    (
        &["elect", "leader", "--value", "a", "--", "true"],
        Duration::from_secs(7),
    ),
];

/// Starts the [`STALLED_COMMANDS`] at once against `server` (stalled by the
/// caller) and checks that each exits 69 by its bound.
fn stalled_commands_exit_69_by_their_bounds(server: &Server) {
    let started = Instant::now();
    let mut running: Vec<_> = STALLED_COMMANDS
        .iter()
        .map(|(args, bound)| {
            let child = dlock(server)
                .args(*args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn dlock");
            (args, *bound, Some(child), None)
        })
        .collect();
    // Past this, a command that still runs is killed and reported.
    let patience = Duration::from_secs(12);
    while running.iter().any(|(_, _, child, _)| child.is_some()) {
        let late = started.elapsed() > patience;
        for (_, _, child, ended) in running.iter_mut() {
            let exited = child.as_mut().is_some_and(|child| {
                if late {
                    let _ = child.kill();
                }
                child.try_wait().expect("try_wait").is_some()
            });
            if exited {
                let took = started.elapsed();
                let out = wait_output(child.take().expect("the child"), patience);
                *ended = Some((took, out));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for (args, bound, _, ended) in running {
        let (took, out) = ended.expect("ended");
        let command = args.join(" ");
        assert_eq!(
            out.status.code(),
            Some(69),
            "dlock {command} after {took:?} ({:?}, killed past {patience:?}): {}",
            out.status,
            stderr_of(&out)
        );
        assert!(
            took < bound,
            "dlock {command} exited after {took:?}, not within {bound:?}: {}",
            stderr_of(&out)
        );
        eprintln!("dlock {command}: 69 after {took:?}");
    }
}

/// Before the stall: a held lock (`held`) and a latch (`gate`).
fn before_the_stall(conn: &mut common::Connection) {
    common::acquire(conn, "held", "holder", 60_000).expect("hold the key");
    cmd(conn, &["DLOCK.LATCH", "gate", "1", "60000"]).expect("DLOCK.LATCH");
}

/// Once the server answers again: the lock held as it was and the latch as
/// it was, with no waiter, no leader, and no connection but `conn`'s.
fn nothing_left_by_the_stalled_commands(conn: &mut common::Connection) {
    eventually(
        "no leader, no latch waiter, no other connection",
        Duration::from_secs(20),
        || {
            let clients = match cmd(conn, &["CLIENT", "LIST"]) {
                Ok(Value::BulkString(text)) => String::from_utf8_lossy(&text).lines().count(),
                Ok(Value::VerbatimString { text, .. }) => text.lines().count(),
                other => panic!("CLIENT LIST: {other:?}"),
            };
            common::info(conn, "leader").is_none()
                && common::info_int(conn, "gate", "waiting") == 0
                && common::info_int(conn, "held", "waiting") == 0
                && clients == 1
        },
    );
    assert_eq!(common::info_int(conn, "gate", "count"), 1);
    assert_eq!(
        common::info_owner(conn, "held").as_deref(),
        Some(&b"holder"[..])
    );
    assert_eq!(common::info_int(conn, "held", "holds"), 1);
}

/// R4.6, R4.7 for the shell: `dlock run`, `elect` and `latch wait` against
/// a frozen server (SIGSTOP: the kernel accepts the connection, nothing
/// answers) exit 69 by their bounds, and leave nothing once it runs again.
#[test]
fn run_elect_and_latch_wait_against_a_frozen_server_exit_69_by_their_bounds() {
    let server = Server::start();
    let mut conn = common::connect_port(server.port, Duration::from_secs(30));
    before_the_stall(&mut conn);
    let pid = common::info_field(&mut conn, "server", "process_id")
        .parse::<u32>()
        .expect("the server's pid");
    send_signal(pid, libc::SIGSTOP);
    let outcome = std::panic::catch_unwind(|| stalled_commands_exit_69_by_their_bounds(&server));
    send_signal(pid, libc::SIGCONT);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    nothing_left_by_the_stalled_commands(&mut conn);
}

/// The same against a paused server (`CLIENT PAUSE ALL`: the connection
/// opens, its `CLIENT ID` waits), longer than every bound.
#[test]
fn run_elect_and_latch_wait_against_a_paused_server_exit_69_by_their_bounds() {
    let server = Server::start();
    let mut conn = common::connect_port(server.port, Duration::from_secs(30));
    before_the_stall(&mut conn);
    cmd(&mut conn, &["CLIENT", "PAUSE", "8000", "ALL"]).expect("CLIENT PAUSE");
    stalled_commands_exit_69_by_their_bounds(&server);
    nothing_left_by_the_stalled_commands(&mut conn);
}
