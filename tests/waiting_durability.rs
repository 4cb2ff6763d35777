//! Waiting and durability: hand-offs and FAIR reservations reach replicas,
//! the RDB and the AOF as deterministic state (same owners, tokens, absolute
//! deadlines and queue order); blocked clients are never saved or
//! replicated; and a restarted, promoted or demoted server still does the
//! right thing with the waiters it has.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

/// "Promptly" on a shared, noisy machine.
const PROMPTLY: Duration = Duration::from_secs(1);

/// Owner, holds, token, absolute deadline and queue of each key.
fn states(conn: &mut Connection, keys: &[&str]) -> Vec<(LockState, Vec<String>)> {
    let locks = snapshot(conn, keys);
    locks
        .into_iter()
        .map(|lock| {
            let queued = queue(conn, &lock.0);
            (lock, queued)
        })
        .collect()
}

/// The wall-clock time (ms since the epoch) at which `instant` was.
fn wall_ms_at(instant: Instant) -> i64 {
    let (now, wall) = (Instant::now(), now_ms());
    wall - now.saturating_duration_since(instant).as_millis() as i64
}

// ---------------------------------------------------------------------------
// Replication.
// ---------------------------------------------------------------------------

#[test]
fn the_replica_matches_the_master_after_hand_offs_and_reservations() {
    let master = Server::start();
    let replica = replica_of(&master, &[]);
    let mut m = master.connect();
    let mut r = replica.connect();
    config_set(&mut m, "dlock.fair-reservation-ms", "60000");

    // Hand-off in RELEASE.
    acquire(&mut m, "released", "h1", 60_000).unwrap();
    let w1 = block_acquire(&master, "released", "w1", 60_000, 10_000);
    wait_for_waiting(&mut m, "released", 1);
    assert_eq!(release(&mut m, "released", "h1"), 0);
    w1.granted();

    // Hand-off by the timer at the end of a lease.
    acquire(&mut m, "expired", "h2", 200).unwrap();
    let w2 = block_acquire(&master, "expired", "w2", 60_000, 10_000);
    wait_for_waiting(&mut m, "expired", 1);
    w2.granted();

    // Hand-off when a SESSION holder's connection closes.
    let mut session = master.connect();
    let reply = cmd(
        &mut session,
        &["DLOCK.ACQUIRE", "session", "h3", "60000", "SESSION"],
    )
    .unwrap();
    assert!(grant(reply).is_some());
    let w3 = block_acquire(&master, "session", "w3", 60_000, 10_000);
    wait_for_waiting(&mut m, "session", 1);
    drop(session);
    w3.granted();

    // Hand-off after DEL.
    acquire(&mut m, "deleted", "h4", 60_000).unwrap();
    let w4 = block_acquire(&master, "deleted", "w4", 60_000, 10_000);
    wait_for_waiting(&mut m, "deleted", 1);
    assert_eq!(int(&mut m, &["DEL", "deleted"]), 1);
    w4.granted();

    // Two waiters of one owner: one grant and one re-entry.
    acquire(&mut m, "reentered", "h5", 60_000).unwrap();
    let w5a = block_acquire(&master, "reentered", "w5", 60_000, 10_000);
    wait_for_waiting(&mut m, "reentered", 1);
    let w5b = block_acquire(&master, "reentered", "w5", 70_000, 10_000);
    wait_for_waiting(&mut m, "reentered", 2);
    assert_eq!(release(&mut m, "reentered", "h5"), 0);
    w5a.granted();
    w5b.granted();
    assert_eq!(info_int(&mut m, "reentered", "holds"), 2);

    // Hand-offs by a RELEASE inside MULTI/EXEC and inside a script.
    acquire(&mut m, "in-multi", "h11", 60_000).unwrap();
    let w11 = block_acquire(&master, "in-multi", "w11", 60_000, 10_000);
    wait_for_waiting(&mut m, "in-multi", 1);
    let replies: Vec<i64> = redis::pipe()
        .atomic()
        .cmd("DLOCK.RELEASE")
        .arg("in-multi")
        .arg("h11")
        .query(&mut m)
        .unwrap();
    assert_eq!(replies, vec![0]);
    w11.granted();
    acquire(&mut m, "in-script", "h12", 60_000).unwrap();
    let w12 = block_acquire(&master, "in-script", "w12", 60_000, 10_000);
    wait_for_waiting(&mut m, "in-script", 1);
    let script = "return redis.call('DLOCK.RELEASE', KEYS[1], ARGV[1])";
    assert_eq!(
        cmd(&mut m, &["EVAL", script, "1", "in-script", "h12"]).unwrap(),
        Value::Int(0)
    );
    w12.granted();

    // Reservations behind a holder, heading a free lock, fulfilled, refreshed.
    acquire(&mut m, "reserved", "h6", 60_000).unwrap();
    assert_eq!(fair(&mut m, "reserved", "r1", 60_000), None);
    assert_eq!(fair(&mut m, "reserved", "r2", 60_000), None);

    acquire(&mut m, "free-reserved", "h7", 60_000).unwrap();
    assert_eq!(fair(&mut m, "free-reserved", "r3", 60_000), None);
    assert_eq!(release(&mut m, "free-reserved", "h7"), 0);

    acquire(&mut m, "fulfilled", "h8", 60_000).unwrap();
    assert_eq!(fair(&mut m, "fulfilled", "r4", 60_000), None);
    assert_eq!(fair(&mut m, "fulfilled", "r5", 60_000), None);
    assert_eq!(release(&mut m, "fulfilled", "h8"), 0);
    assert!(acquire(&mut m, "fulfilled", "r4", 60_000).is_some());

    acquire(&mut m, "refreshed", "h9", 60_000).unwrap();
    assert_eq!(fair(&mut m, "refreshed", "r6", 60_000), None);
    assert_eq!(fair(&mut m, "refreshed", "r7", 60_000), None);
    config_set(&mut m, "dlock.fair-reservation-ms", "120000");
    assert_eq!(fair(&mut m, "refreshed", "r6", 60_000), None);

    // A blocked waiter on the master is never replicated.
    acquire(&mut m, "with-waiter", "h10", 60_000).unwrap();
    let w10 = block_acquire(&master, "with-waiter", "w10", 60_000, 20_000);
    wait_for_waiting(&mut m, "with-waiter", 1);
    assert_eq!(fair(&mut m, "with-waiter", "r8", 60_000), None);

    wait_for_replica(&mut m);
    let keys = [
        "released",
        "expired",
        "session",
        "deleted",
        "reentered",
        "reserved",
        "free-reserved",
        "fulfilled",
        "refreshed",
        "in-multi",
        "in-script",
    ];
    let on_master = states(&mut m, &keys);
    let on_replica = states(&mut r, &keys);
    assert_eq!(on_master, on_replica);
    let expected_queues: Vec<Vec<String>> = vec![
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        strings(&["r1", "r2"]),
        strings(&["r3"]),
        strings(&["r5"]),
        strings(&["r6", "r7"]),
        vec![],
        vec![],
    ];
    let queues: Vec<Vec<String>> = on_master.iter().map(|(_, q)| q.clone()).collect();
    assert_eq!(queues, expected_queues);
    let owners: Vec<Option<Vec<u8>>> = on_master.iter().map(|(l, _)| l.1.clone()).collect();
    let expected_owners: Vec<Option<Vec<u8>>> = [
        Some("w1"),
        Some("w2"),
        Some("w3"),
        Some("w4"),
        Some("w5"),
        Some("h6"),
        None,
        Some("r4"),
        Some("h9"),
        Some("w11"),
        Some("w12"),
    ]
    .iter()
    .map(|o| o.map(|o| o.as_bytes().to_vec()))
    .collect();
    assert_eq!(owners, expected_owners);

    assert_eq!(queue(&mut m, "with-waiter"), strings(&["w10", "r8"]));
    assert_eq!(
        queue(&mut r, "with-waiter"),
        strings(&["r8"]),
        "blocked clients stay on the master"
    );
    assert_eq!(
        snapshot(&mut m, &["with-waiter"]),
        snapshot(&mut r, &["with-waiter"])
    );
    assert_eq!(
        int(&mut m, &["DBSIZE"]),
        int(&mut r, &["DBSIZE"]),
        "same keys"
    );

    // The waiter leaves; the reservation now heads; the replica follows.
    let id = w10.id.to_string();
    assert_eq!(int(&mut m, &["CLIENT", "KILL", "ID", &id]), 1);
    let _ = w10.join();
    assert_eq!(release(&mut m, "with-waiter", "h10"), 0);
    wait_for_replica(&mut m);
    assert_eq!(
        states(&mut m, &["with-waiter"]),
        states(&mut r, &["with-waiter"])
    );
    assert_eq!(queue(&mut r, "with-waiter"), strings(&["r8"]));
    assert!(!master.log().contains("panicked"));
    assert!(!replica.log().contains("panicked"));
}

#[test]
fn a_promoted_replica_hands_the_lock_over_at_the_lease_deadline() {
    let master = Server::start();
    let replica = replica_of(&master, &[]);
    let mut m = master.connect();
    // Right after a full sync Redis may take up to a second (the replica's
    // first ack) to count the replica in WAIT: settle that before the lease.
    let _: () = redis::cmd("SET")
        .arg("warm-up")
        .arg(1)
        .query(&mut m)
        .unwrap();
    wait_for_replica(&mut m);
    acquire(&mut m, "job", "old", 1_000).unwrap();
    let deadline = pexpiretime(&mut m, "job");
    wait_for_replica(&mut m);

    let mut r = connect_patient(&replica, Duration::from_secs(5));
    // A replica refuses to queue anyone: no blocking, no reservation.
    for command in [
        &["DLOCK.ACQUIRE", "job", "new", "5000", "BLOCK", "0"][..],
        &["DLOCK.FAIR", "job", "new", "5000"],
        &["DLOCK.FAIR", "job", "new", "5000", "BLOCK", "0"],
    ] {
        let error = error_of(&mut r, command);
        assert!(error.starts_with("READONLY"), "{command:?}: {error}");
    }
    assert!(queue(&mut r, "job").is_empty());
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    wait_for_info(&mut r, "replication", "role:master");
    let promoted_at = now_ms();
    let owner = info_owner(&mut r, "job");
    assert_eq!(
        owner,
        Some(b"old".to_vec()),
        "promoted at {promoted_at}, lease deadline {deadline}, INFO {:?}, PEXPIRETIME {}",
        info(&mut r, "job"),
        pexpiretime(&mut r, "job")
    );
    let next = block_acquire(&replica, "job", "new", 5_000, 5_000);
    let ((_, holds, owner), at) = next.granted();
    assert_eq!((holds, owner), (1, b"new".to_vec()));
    let granted_at = wall_ms_at(at);
    assert!(
        granted_at >= deadline,
        "granted at {granted_at}, before the lease deadline {deadline}"
    );
    assert!(
        granted_at < deadline + PROMPTLY.as_millis() as i64,
        "granted at {granted_at}, long after the lease deadline {deadline}"
    );
    assert_eq!(info_owner(&mut r, "job"), Some(b"new".to_vec()));
}

#[test]
fn a_waiter_on_a_demoted_master_returns_promptly() {
    let master = Server::start();
    let other = Server::start();
    let mut m = connect_patient(&master, Duration::from_secs(10));
    acquire(&mut m, "job", "holder", 60_000).unwrap();
    let forever = block_acquire(&master, "job", "waiter", 5_000, 0);
    wait_for_waiting(&mut m, "job", 1);
    let demoted_at = Instant::now();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port)
        .query(&mut m)
        .unwrap();
    let (reply, at) = forever.join();
    assert!(
        at - demoted_at < PROMPTLY,
        "the waiter returned {:?} after the demotion",
        at - demoted_at
    );
    match reply {
        Err(_) | Ok(Value::Nil) => {}
        Ok(other) => panic!("a demoted master granted the lock: {other:?}"),
    }
    let mut m = master.connect();
    wait_for_info(&mut m, "replication", "master_link_status:up");
    assert_eq!(
        info_field(&mut m, "clients", "blocked_clients"),
        "0",
        "nobody is left blocked"
    );
    let pong: String = redis::cmd("PING").query(&mut m).unwrap();
    assert_eq!(pong, "PONG");
    assert!(!master.log().contains("panicked"));
}

// ---------------------------------------------------------------------------
// RDB and AOF.
// ---------------------------------------------------------------------------

/// Keys whose state must survive a restart exactly.
const DURABLE_KEYS: &[&str] = &["queued", "free-reserved", "handed", "expired-handoff"];

/// Reservations behind a holder and heading a free lock, plus hand-offs in
/// RELEASE and by the timer. Returns a waiter still blocked on "queued".
fn first_phase(server: &Server, conn: &mut Connection) -> Pending {
    config_set(conn, "dlock.fair-reservation-ms", "600000");
    acquire(conn, "queued", "h1", 60_000).unwrap();
    for owner in ["r1", "r2", "r3"] {
        assert_eq!(fair(conn, "queued", owner, 60_000), None);
    }
    acquire(conn, "free-reserved", "h2", 60_000).unwrap();
    assert_eq!(fair(conn, "free-reserved", "s1", 60_000), None);
    assert_eq!(release(conn, "free-reserved", "h2"), 0);
    // A blocked client at save time: never saved.
    let stuck = block_acquire(server, "queued", "blocked", 60_000, 20_000);
    wait_for_waiting(conn, "queued", 4);
    stuck
}

/// More hand-offs and a short reservation (after a rewrite, if any).
/// Returns the short reservation's deadline.
fn second_phase(server: &Server, conn: &mut Connection) -> i64 {
    acquire(conn, "handed", "h3", 60_000).unwrap();
    let w3 = block_acquire(server, "handed", "w3", 60_000, 10_000);
    wait_for_waiting(conn, "handed", 1);
    assert_eq!(release(conn, "handed", "h3"), 0);
    w3.granted();

    acquire(conn, "expired-handoff", "h4", 200).unwrap();
    let w4 = block_acquire(server, "expired-handoff", "w4", 60_000, 10_000);
    wait_for_waiting(conn, "expired-handoff", 1);
    w4.granted();

    config_set(conn, "dlock.fair-reservation-ms", "2000");
    acquire(conn, "short", "h5", 60_000).unwrap();
    assert_eq!(fair(conn, "short", "s2", 60_000), None);
    assert_eq!(release(conn, "short", "h5"), 0);
    pexpiretime(conn, "short")
}

/// Checks the restored state against `before` (taken before the restart,
/// with the blocked waiter removed), then that the restored reservations
/// and deadlines still rule the locks.
fn assert_restored(
    server: &Server,
    conn: &mut Connection,
    before: &[(LockState, Vec<String>)],
    short_deadline: i64,
) {
    let after = states(conn, DURABLE_KEYS);
    assert_eq!(
        before,
        after.as_slice(),
        "owners, tokens, deadlines, queues"
    );
    assert_eq!(queue(conn, "queued"), strings(&["r1", "r2", "r3"]));
    assert_eq!(queue(conn, "free-reserved"), strings(&["s1"]));
    assert_eq!(info_owner(conn, "handed"), Some(b"w3".to_vec()));
    assert_eq!(info_owner(conn, "expired-handoff"), Some(b"w4".to_vec()));
    assert_eq!(pexpiretime(conn, "short"), short_deadline);

    // The module itself still knows the absolute reservation deadlines: when
    // it recomputes a key's expiry, it lands on the same instant.
    let queued_deadline = before[0].0 .4;
    assert_eq!(release(conn, "queued", "h1"), 0);
    assert_eq!(pexpiretime(conn, "queued"), queued_deadline);
    let free_deadline = before[1].0 .4;
    assert_eq!(fair(conn, "free-reserved", "late", 60_000), None);
    assert_eq!(queue(conn, "free-reserved"), strings(&["s1", "late"]));
    assert_eq!(pexpiretime(conn, "free-reserved"), free_deadline);

    // And the reservations still hold their places.
    assert_eq!(acquire(conn, "queued", "r2", 60_000), None);
    assert_eq!(acquire(conn, "queued", "x", 60_000), None);
    assert!(fair(conn, "queued", "r1", 60_000).is_some());
    assert_eq!(queue(conn, "queued"), strings(&["r2", "r3"]));
    assert_eq!(acquire(conn, "free-reserved", "late", 60_000), None);
    assert!(acquire(conn, "free-reserved", "s1", 60_000).is_some());

    // A waiter behind the short reservation is granted when it runs out, at
    // its original absolute deadline, not before.
    let waiter = block_acquire(server, "short", "w5", 60_000, 10_000);
    let sent_at = wall_ms_at(waiter.sent);
    let ((_, _, owner), at) = waiter.granted();
    assert_eq!(owner, b"w5");
    let granted_at = wall_ms_at(at);
    assert!(
        granted_at >= short_deadline,
        "granted at {granted_at}, before the reservation deadline {short_deadline}"
    );
    assert!(
        granted_at < short_deadline.max(sent_at) + PROMPTLY.as_millis() as i64,
        "granted at {granted_at}, reservation deadline {short_deadline}"
    );
    assert!(!server.log().contains("panicked"));
}

/// The state before a restart, as it must come back: the blocked waiter on
/// "queued" is dropped.
fn expected_after_restart(conn: &mut Connection) -> Vec<(LockState, Vec<String>)> {
    let mut before = states(conn, DURABLE_KEYS);
    assert_eq!(before[0].1, strings(&["r1", "r2", "r3", "blocked"]));
    before[0].1.retain(|owner| owner != "blocked");
    before
}

#[test]
fn rdb_restores_reservations_and_hand_offs() {
    let mut server = Server::with_args(&["--save", "", "--appendonly", "no"]);
    let mut conn = server.connect();
    let stuck = first_phase(&server, &mut conn);
    let short_deadline = second_phase(&server, &mut conn);
    let before = expected_after_restart(&mut conn);
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    server.restart();
    let _ = stuck.join();
    let mut conn = server.connect();
    assert_restored(&server, &mut conn, &before, short_deadline);
}

fn aof_round_trip(preamble: &str, rewrite: bool) {
    let args = aof_always_args(preamble);
    let mut server = Server::with_args(&args);
    let mut conn = server.connect();
    let stuck = first_phase(&server, &mut conn);
    if rewrite {
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
        wait_for_info(&mut conn, "persistence", "aof_rewrite_in_progress:0");
        wait_for_info(&mut conn, "persistence", "aof_rewrite_scheduled:0");
        wait_for_info(&mut conn, "persistence", "aof_last_bgrewrite_status:ok");
    }
    let short_deadline = second_phase(&server, &mut conn);
    let before = expected_after_restart(&mut conn);
    server.kill();
    server.restart();
    let _ = stuck.join();
    let mut conn = server.connect();
    assert_restored(&server, &mut conn, &before, short_deadline);
}

#[test]
fn aof_restores_reservations_and_hand_offs_after_a_crash() {
    aof_round_trip("yes", false);
}

#[test]
fn aof_rewrite_with_rdb_preamble_restores_reservations_and_hand_offs() {
    aof_round_trip("yes", true);
}

#[test]
fn aof_rewrite_without_preamble_restores_reservations_and_hand_offs() {
    aof_round_trip("no", true);
}

fn restart_hands_over_at_the_lease_deadline(args: &[&str], save: bool) {
    let mut server = Server::with_args(args);
    let mut conn = server.connect();
    acquire(&mut conn, "job", "old", 1_000).unwrap();
    let deadline = pexpiretime(&mut conn, "job");
    if save {
        let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    }
    server.kill();
    server.restart();
    let mut conn = server.connect();
    assert_eq!(info_owner(&mut conn, "job"), Some(b"old".to_vec()));
    let next = block_acquire(&server, "job", "new", 5_000, 5_000);
    let sent_at = wall_ms_at(next.sent);
    let ((_, holds, owner), at) = next.granted();
    assert_eq!((holds, owner), (1, b"new".to_vec()));
    let granted_at = wall_ms_at(at);
    assert!(
        granted_at >= deadline,
        "granted at {granted_at}, before the lease deadline {deadline}"
    );
    assert!(
        granted_at < deadline.max(sent_at) + PROMPTLY.as_millis() as i64,
        "granted at {granted_at}, lease deadline {deadline}"
    );
}

#[test]
fn a_server_restarted_from_rdb_hands_over_at_the_lease_deadline() {
    restart_hands_over_at_the_lease_deadline(&["--save", "", "--appendonly", "no"], true);
}

#[test]
fn a_server_restarted_from_aof_hands_over_at_the_lease_deadline() {
    restart_hands_over_at_the_lease_deadline(
        &[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ],
        false,
    );
}

/// A SESSION hold outlives its connection across a restart (the connection
/// no longer exists): it simply lives until its lease ends.
#[test]
fn a_session_hold_restored_after_a_restart_lives_until_its_lease_ends() {
    let mut server = Server::with_args(&aof_always_args("yes"));
    let mut holder = server.connect();
    let reply = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "job", "A", "1500", "SESSION"],
    )
    .unwrap();
    let (token, _, _) = grant(reply).expect("granted");
    server.kill();
    server.restart();
    let mut conn = server.connect();
    assert_eq!(info_owner(&mut conn, "job"), Some(b"A".to_vec()));
    assert_eq!(info_int(&mut conn, "job", "token"), token);
    // Connections coming and going do not release it.
    drop(server.connect());
    assert_eq!(acquire(&mut conn, "job", "B", 1_000), None);
    assert_eq!(info_owner(&mut conn, "job"), Some(b"A".to_vec()));
    wait_until("the restored lease to end", || {
        int(&mut conn, &["EXISTS", "job"]) == 0
    });
    assert!(acquire(&mut conn, "job", "B", 1_000).is_some());
}
