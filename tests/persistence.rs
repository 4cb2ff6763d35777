//! Locks and the fencing-token counter survive restarts: RDB, AOF (with and
//! without the RDB preamble, across BGREWRITEAOF), and restarts with
//! persistence off. Also DEBUG DIGEST-KEY, COPY and MEMORY USAGE.

use crate::common;

use common::*;

const KEYS: &[&str] = &[
    "plain",
    "reentered",
    "renewed",
    "generated",
    "released-once",
];

/// Builds a varied set of locks and returns the highest token issued.
fn workload(conn: &mut Connection) -> i64 {
    let mut highest = 0;
    let mut note = |grant: Option<(i64, i64, Vec<u8>)>| {
        let (token, _, owner) = grant.expect("granted");
        highest = highest.max(token);
        owner
    };
    note(acquire(conn, "plain", "owner-a", 600_000));
    note(acquire(conn, "reentered", "owner-b", 600_000));
    note(acquire(conn, "reentered", "owner-b", 600_000));
    note(acquire(conn, "reentered", "owner-b", 700_000));
    note(acquire(conn, "renewed", "owner-c", 1_000));
    assert!(int(conn, &["DLOCK.RENEW", "renewed", "owner-c", "900000"]) > 0);
    note(acquire(conn, "generated", "*", 600_000));
    note(acquire(conn, "released-once", "owner-d", 600_000));
    note(acquire(conn, "released-once", "owner-d", 600_000));
    assert_eq!(int(conn, &["DLOCK.RELEASE", "released-once", "owner-d"]), 1);
    note(acquire(conn, "gone", "owner-e", 600_000));
    assert_eq!(int(conn, &["DLOCK.RELEASE", "gone", "owner-e"]), 0);
    highest
}

fn assert_restored(before: &[LockState], conn: &mut Connection) {
    let after = snapshot(conn, KEYS);
    assert_eq!(
        before,
        after.as_slice(),
        "owner, holds, token and deadline restored"
    );
    assert_eq!(info(conn, "gone"), None, "a released lock stays released");
    for (key, owner, holds, token, deadline) in before {
        assert!(
            owner.is_some() && *holds > 0 && *token > 0 && *deadline > 0,
            "{key} was set up"
        );
    }
}

#[test]
fn rdb_save_and_restart_restores_every_lock() {
    let mut server = Server::with_args(&["--save", "", "--appendonly", "no"]);
    let mut conn = server.connect();
    let highest = workload(&mut conn);
    let before = snapshot(&mut conn, KEYS);
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    server.restart();
    let mut conn = server.connect();
    assert_restored(&before, &mut conn);
    let (token, _, _) = acquire(&mut conn, "fresh", "x", 1_000).unwrap();
    assert!(token > highest);
}

#[test]
fn rdb_persists_the_token_counter_even_with_no_lock_left() {
    // The AOF seeds the counter far above the wall clock; after every lock is
    // gone, only the RDB aux field can carry the counter across a restart.
    let seeded: u64 = 5_000_000_000_000_000_000;
    let aof = aof_with_token(seeded);
    let mut server = Server::with_files(
        &[("appendonly.aof", &aof)],
        &["--save", "", "--appendonly", "yes"],
    );
    let mut conn = server.connect();
    assert_eq!(info_int(&mut conn, "seed", "token"), seeded as i64);
    let (issued, _, _) = acquire(&mut conn, "k", "me", 60_000).unwrap();
    assert_eq!(issued, seeded as i64 + 1);
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("no")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    std::fs::remove_dir_all(server.dir.join("appendonlydir")).unwrap();
    server.restart_with_args(&["--save", "", "--appendonly", "no"]);
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DBSIZE"]), 0);
    let (token, _, _) = acquire(&mut conn, "k", "me", 60_000).unwrap();
    assert!(
        token > issued,
        "token {token} after restart, {issued} before"
    );
}

fn aof_round_trip(preamble: &str) {
    let args = aof_always_args(preamble);
    let mut server = Server::with_args(&args);
    let mut conn = server.connect();
    let highest = workload(&mut conn);
    // Rewrite, then change more after the rewrite so both the base file and
    // the incremental log are replayed.
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
    wait_for_info(&mut conn, "persistence", "aof_rewrite_in_progress:0");
    wait_for_info(&mut conn, "persistence", "aof_rewrite_scheduled:0");
    acquire(&mut conn, "plain", "owner-a", 800_000).unwrap();
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "plain", "owner-a"]), 1);
    let before = snapshot(&mut conn, KEYS);
    server.kill();
    server.restart();
    let mut conn = server.connect();
    assert_restored(&before, &mut conn);
    let (token, _, _) = acquire(&mut conn, "fresh", "x", 1_000).unwrap();
    assert!(token > highest);
    assert!(!server.log().contains("panicked"));
}

#[test]
fn aof_with_rdb_preamble_restores_every_lock_after_a_crash() {
    aof_round_trip("yes");
}

#[test]
fn aof_without_preamble_replays_setstate_after_a_crash() {
    aof_round_trip("no");
}

#[test]
fn tokens_never_go_backwards_after_a_restart_without_persistence() {
    let mut server = Server::start();
    let mut conn = server.connect();
    let mut highest = 0;
    for i in 0..20 {
        let (token, _, _) = acquire(&mut conn, &format!("k{i}"), "me", 60_000).unwrap();
        highest = highest.max(token);
    }
    server.kill();
    server.restart();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DBSIZE"]), 0, "nothing was persisted");
    let (token, _, _) = acquire(&mut conn, "k0", "other", 60_000).unwrap();
    assert!(
        token > highest,
        "token {token} after restart, {highest} before"
    );
}

#[test]
fn digest_copy_and_memory_usage() {
    let server = server_with_debug();
    let mut conn = server.connect();
    acquire(&mut conn, "a", "owner", 600_000).unwrap();
    let digest = |conn: &mut Connection, key: &str| -> Vec<String> {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(key)
            .query(conn)
            .unwrap()
    };
    let first = digest(&mut conn, "a");
    assert_ne!(first, vec!["0".repeat(40)]);
    acquire(&mut conn, "a", "owner", 600_000).unwrap();
    let second = digest(&mut conn, "a");
    assert_ne!(first, second, "the digest covers the hold count");

    assert_eq!(int(&mut conn, &["COPY", "a", "b"]), 1);
    assert_eq!(snapshot(&mut conn, &["b"])[0].1, Some(b"owner".to_vec()));
    assert_eq!(info_int(&mut conn, "b", "holds"), 2);
    assert_eq!(
        info_int(&mut conn, "b", "token"),
        info_int(&mut conn, "a", "token")
    );
    assert_eq!(digest(&mut conn, "b"), second);
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "b", "owner"]), 1);
    assert_eq!(
        info_int(&mut conn, "a", "holds"),
        2,
        "the copy is independent"
    );

    let owner = "o".repeat(400);
    acquire(&mut conn, "big", &owner, 600_000).unwrap();
    let small = int(&mut conn, &["MEMORY", "USAGE", "a"]);
    let big = int(&mut conn, &["MEMORY", "USAGE", "big"]);
    assert!(
        big >= small + 390,
        "memory usage counts the owner: {small} vs {big}"
    );

    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut conn).unwrap();
    assert_eq!(
        digest(&mut conn, "a"),
        second,
        "DEBUG RELOAD round-trips the value"
    );
}
