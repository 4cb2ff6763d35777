//! The grace window (`dlock.grace-ms`) and the lease bound
//! (`dlock.max-lease-ms`): configs validated at CONFIG SET and at startup;
//! ttls above the bound refused; after a start, a reload or a promotion no
//! new hold for `dlock.grace-ms` (null without BLOCK, FIFO grants at the
//! window's end with BLOCK) while known holds keep working; INFO fields,
//! log lines and keyspace events.

use crate::common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GRACE_MS: u64 = 1_500;

fn grace_args(grace_ms: u64) -> Vec<String> {
    strings(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "yes",
        "--dlock.max-lease-ms",
        "3000",
        "--dlock.grace-ms",
        &grace_ms.to_string(),
    ])
}

fn server_with_grace(grace_ms: u64) -> Server {
    let args = grace_args(grace_ms);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::with_args(&args)
}

fn remaining(conn: &mut Connection) -> i64 {
    info_number(conn, "dlock", "dlock_grace_remaining_ms")
}

fn deferred(conn: &mut Connection) -> i64 {
    info_number(conn, "dlock", "dlock_grace_deferred")
}

fn wait_for_window_end(conn: &mut Connection) {
    wait_until("the grace window closes", || remaining(conn) == 0);
}

#[test]
fn configs_are_validated_against_each_other() {
    let server = Server::start();
    let mut conn = server.connect();
    let get = |conn: &mut Connection, name: &str| -> String {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query(conn)
            .unwrap();
        pair[1].clone()
    };
    assert_eq!(get(&mut conn, "dlock.max-lease-ms"), "0");
    assert_eq!(get(&mut conn, "dlock.grace-ms"), "0");
    let refused = error_of(&mut conn, &["CONFIG", "SET", "dlock.grace-ms", "100"]);
    assert!(
        refused.contains("dlock.grace-ms must be at most dlock.max-lease-ms"),
        "{refused}"
    );
    config_set(&mut conn, "dlock.max-lease-ms", "1000");
    let refused = error_of(&mut conn, &["CONFIG", "SET", "dlock.grace-ms", "1001"]);
    assert!(
        refused.contains("dlock.grace-ms must be at most"),
        "{refused}"
    );
    config_set(&mut conn, "dlock.grace-ms", "1000");
    for bad in ["999", "0"] {
        let refused = error_of(&mut conn, &["CONFIG", "SET", "dlock.max-lease-ms", bad]);
        assert!(
            refused.contains("dlock.max-lease-ms must be at least dlock.grace-ms"),
            "{refused}"
        );
    }
    assert_eq!(get(&mut conn, "dlock.max-lease-ms"), "1000");
    assert_eq!(get(&mut conn, "dlock.grace-ms"), "1000");
    let negative = error_of(&mut conn, &["CONFIG", "SET", "dlock.grace-ms", "-1"]);
    assert!(negative.starts_with("ERR"), "{negative}");
    config_set(&mut conn, "dlock.grace-ms", "0");
    config_set(&mut conn, "dlock.max-lease-ms", "0");
}

#[test]
fn a_server_refuses_to_start_with_a_grace_window_above_the_lease_bound() {
    for args in [
        vec!["--dlock.grace-ms", "100"],
        vec!["--dlock.max-lease-ms", "100", "--dlock.grace-ms", "200"],
    ] {
        let dir = std::env::temp_dir().join(format!("dlock-grace-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new(server_binary())
            .args(["--port", "0", "--save", "", "--dir"])
            .arg(&dir)
            .arg("--loadmodule")
            .arg(module_path())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            status.is_some_and(|s| !s.success()),
            "redis-server {args:?} should refuse to start"
        );
    }
    // Both in redis.conf order max-lease first or not: accepted.
    let server = Server::with_args(&["--dlock.grace-ms", "100", "--dlock.max-lease-ms", "200"]);
    let mut conn = server.connect();
    let limit: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dlock.grace-ms")
        .query(&mut conn)
        .unwrap();
    assert_eq!(limit[1], "100");
}

#[test]
fn a_ttl_above_the_lease_bound_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.max-lease-ms", "1000");
    let expected =
        "ERR invalid ttl: above dlock.max-lease-ms, the longest lease this server grants";
    for args in [
        vec!["DLOCK.ACQUIRE", "k", "me", "1001"],
        vec!["DLOCK.ACQUIRE", "k", "me", "1001", "BLOCK", "10"],
        vec!["DLOCK.FAIR", "k", "me", "1001"],
        vec!["DLOCK.FAIR", "k", "me", "5000", "BLOCK", "0", "SESSION"],
        vec!["DLOCK.ACQUIRE", "k", "me", "1001", "SHARED"],
        vec![
            "DLOCK.ACQUIRE",
            "k",
            "me",
            "1001",
            "SHARED",
            "LIMIT",
            "2",
            "BLOCK",
            "5",
        ],
        vec!["DLOCK.FAIR", "k", "me", "1001", "SHARED", "LIMIT", "2"],
    ] {
        assert_eq!(error_of(&mut conn, &args), expected, "{args:?}");
    }
    assert_eq!(int(&mut conn, &["EXISTS", "k"]), 0);
    let (token, _, _) = acquire(&mut conn, "k", "me", 1000).expect("at the bound");
    assert_eq!(
        error_of(&mut conn, &["DLOCK.RENEW", "k", "me", "1001"]),
        expected
    );
    assert_eq!(int(&mut conn, &["DLOCK.RENEW", "k", "me", "1000"]), token);
    // The bound is checked before the key's type.
    cmd(&mut conn, &["SET", "s", "x"]).unwrap();
    assert_eq!(
        error_of(&mut conn, &["DLOCK.ACQUIRE", "s", "me", "2000"]),
        expected
    );
}

#[test]
fn at_startup_no_new_hold_until_the_window_ends_then_waiters_in_fifo_order() {
    let server = server_with_grace(GRACE_MS);
    let mut conn = server.connect();
    let left = remaining(&mut conn);
    assert!(left > 0 && left <= GRACE_MS as i64, "remaining {left}");
    // Without BLOCK: null, as if held; nothing is created.
    assert_eq!(acquire(&mut conn, "job", "early", 1000), None);
    assert_eq!(fair(&mut conn, "other", "early", 1000), None);
    assert_eq!(int(&mut conn, &["EXISTS", "job"]), 0);
    assert!(deferred(&mut conn) >= 2);
    // With BLOCK: queued in order, granted when the window ends.
    let first = block_acquire(&server, "job", "w1", 1000, 10_000);
    wait_for_waiting(&mut conn, "job", 1);
    let second = block_acquire(&server, "job", "w2", 1000, 10_000);
    wait_for_waiting(&mut conn, "job", 2);
    let third = block_acquire(&server, "job", "w3", 1000, 10_000);
    wait_for_waiting(&mut conn, "job", 3);
    assert_eq!(queue(&mut conn, "job"), strings(&["w1", "w2", "w3"]));
    let ((token1, _, owner1), at1) = first.granted();
    let ends_at = Instant::now();
    assert_eq!(owner1, b"w1");
    assert_eq!(remaining(&mut conn), 0, "granted only after the window");
    assert!(!second.is_finished() && !third.is_finished());
    assert_eq!(release(&mut conn, "job", "w1"), 0);
    let ((token2, _, owner2), at2) = second.granted();
    assert_eq!(owner2, b"w2");
    assert!(token2 > token1 && at2 > at1);
    assert_eq!(release(&mut conn, "job", "w2"), 0);
    let ((_, _, owner3), _) = third.granted();
    assert_eq!(owner3, b"w3");
    assert!(ends_at.elapsed() < Duration::from_secs(5));
    // After the window, the usual rules.
    assert!(acquire(&mut conn, "free", "late", 1000).is_some());
    let log = server.log();
    assert!(
        log.contains("grace window opened (server started)"),
        "{log}"
    );
    wait_until("the log says the window closed", || {
        server.log().contains("grace window closed")
    });
}

/// A window opens on a start, a reload or a promotion, and only then: once
/// it has closed, raising `dlock.grace-ms` opens none. (The window used to
/// be counted from its opening with the current `dlock.grace-ms`, so a
/// raise within the new length of the server's start reopened it.)
#[test]
fn raising_grace_ms_after_the_window_closed_opens_no_window() {
    let server = server_with_grace(200);
    let mut conn = server.connect();
    wait_until("the log says the window closed", || {
        server.log().contains("grace window closed")
    });
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.grace-ms")
        .arg("3000")
        .query(&mut conn)
        .unwrap();
    assert_eq!(remaining(&mut conn), 0);
    assert!(
        acquire(&mut conn, "job", "late", 1000).is_some(),
        "no window after the raise"
    );
    assert_eq!(deferred(&mut conn), 0);
}

#[test]
fn a_blocked_waiter_whose_timeout_ends_inside_the_window_gets_null() {
    let server = server_with_grace(GRACE_MS);
    let mut conn = server.connect();
    let waiter = block_acquire(&server, "job", "w", 1000, 200);
    waiter.refused();
    assert!(
        remaining(&mut conn) > 0,
        "null at its timeout, inside the window"
    );
}

#[test]
fn after_a_reload_known_holds_keep_working_and_others_wait() {
    let server = server_with_grace(100);
    let mut conn = server.connect();
    wait_for_window_end(&mut conn);
    let (token, _, _) = acquire(&mut conn, "job", "holder", 3000).unwrap();
    config_set(&mut conn, "dlock.grace-ms", "2000");
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut conn).unwrap();
    assert!(remaining(&mut conn) > 1000, "a reload opens a window");
    // The holder re-enters, renews and releases inside the window.
    let (again, holds, _) = acquire(&mut conn, "job", "holder", 3000).unwrap();
    assert_eq!((again, holds), (token, 2));
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "job", "holder", "3000"]),
        token
    );
    // Others: null, or queued.
    assert_eq!(acquire(&mut conn, "job", "other", 1000), None);
    let waiter = block_acquire(&server, "job", "waiter", 1000, 10_000);
    wait_for_waiting(&mut conn, "job", 1);
    assert_eq!(release(&mut conn, "job", "holder"), 1);
    assert_eq!(release(&mut conn, "job", "holder"), 0);
    // Released inside the window: the lock stays free until it ends.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiter.is_finished(), "granted inside the window");
    assert!(remaining(&mut conn) > 0);
    let ((new_token, _, owner), _) = waiter.granted();
    assert_eq!(owner, b"waiter");
    assert!(new_token > token);
    assert_eq!(remaining(&mut conn), 0);
}

#[test]
fn readers_known_before_a_reload_reenter_while_new_readers_and_upgrades_wait() {
    let server = server_with_grace(100);
    let mut conn = server.connect();
    wait_for_window_end(&mut conn);
    let read = |conn: &mut Connection, owner: &str| {
        grant(cmd(conn, &["DLOCK.ACQUIRE", "doc", owner, "3000", "SHARED"]).unwrap())
    };
    let (token, _, _) = read(&mut conn, "r1").expect("a reader");
    config_set(&mut conn, "dlock.grace-ms", "1500");
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut conn).unwrap();
    assert!(remaining(&mut conn) > 0);
    let (again, holds, _) = read(&mut conn, "r1").expect("the reader re-enters");
    assert_eq!((again, holds), (token, 2));
    assert_eq!(read(&mut conn, "r2"), None, "a new reader waits");
    assert_eq!(
        acquire(&mut conn, "doc", "r1", 1000),
        None,
        "an upgrade (a new token) waits"
    );
    wait_for_window_end(&mut conn);
    assert!(read(&mut conn, "r2").is_some());
}

#[test]
fn a_promoted_replica_opens_its_own_window_and_replicates_the_grants_after_it() {
    let master = server_with_grace(100);
    let mut master_conn = master.connect();
    wait_for_window_end(&mut master_conn);
    let grace = GRACE_MS.to_string();
    let extra = ["--dlock.max-lease-ms", "3000", "--dlock.grace-ms", &grace];
    let replica = replica_of(&master, &extra);
    let mut replica_conn = replica.connect();
    wait_for_window_end(&mut replica_conn);
    let (token, _, _) = acquire(&mut master_conn, "job", "holder", 3000).unwrap();
    wait_for_replica(&mut master_conn);
    // A second replica of the replica sees the grants made at window end.
    let sub = replica_of(&replica, &[]);
    let mut sub_conn = sub.connect();

    let mut events = replica.connect();
    config_set(&mut replica_conn, "notify-keyspace-events", "KEd");
    let mut pubsub = events.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:dlock.grace_*").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica_conn)
        .unwrap();
    let left = remaining(&mut replica_conn);
    assert!(left > 0 && left <= GRACE_MS as i64, "remaining {left}");
    // The holder known from replication keeps working.
    assert_eq!(
        int(&mut replica_conn, &["DLOCK.RENEW", "job", "holder", "500"]),
        token
    );
    assert_eq!(acquire(&mut replica_conn, "job", "other", 1000), None);
    assert_eq!(acquire(&mut replica_conn, "free", "other", 1000), None);
    let waiter = block_acquire(&replica, "free", "waiter", 2000, 10_000);
    wait_for_waiting(&mut replica_conn, "free", 1);
    let ((granted, _, owner), _) = waiter.granted();
    assert_eq!(owner, b"waiter");
    assert!(granted > token);
    assert_eq!(remaining(&mut replica_conn), 0);
    let first: redis::Msg = pubsub.get_message().expect("grace_start event");
    assert_eq!(first.get_channel_name(), "__keyevent@0__:dlock.grace_start");
    let second: redis::Msg = pubsub.get_message().expect("grace_end event");
    assert_eq!(second.get_channel_name(), "__keyevent@0__:dlock.grace_end");
    assert!(info_number(&mut replica_conn, "dlock", "dlock_grace_deferred") >= 3);
    // The grant made at the window's end reached the replica's replica.
    wait_until("the hand-off is replicated", || {
        info_owner(&mut sub_conn, "free").as_deref() == Some(b"waiter".as_slice())
    });
    assert!(replica
        .log()
        .contains("grace window opened (promoted to master)"));
}
