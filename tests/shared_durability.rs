//! Shared holds (issue 11) are part of the value: RDB (a new encoding
//! version; a version-1 file written before shared holds existed still
//! loads), AOF with and without the RDB preamble across BGREWRITEAOF,
//! replication after shared hand-offs, COPY, DUMP/RESTORE, DEBUG
//! DIGEST-VALUE and MEMORY USAGE.
//!
//! Queued reservations carry a mode and a limit that DLOCK.INFO does not
//! show: the digest, which covers the whole value, shows that they survive.

use crate::common;
use crate::sharedkit;

use common::*;
use sharedkit::*;

/// An RDB written by dlock before shared holds (encoding version 1), with
/// `SAVE` on redis-server 7.0.15 and `dlock.fair-reservation-ms` of ten
/// years, so that its leases and reservations are still live for a decade:
///
/// * `v1:held`: `alice` holds 2 (token 1795461796634870), reservations of
///   `bob` then `carol`;
/// * `v1:plain`: `dave` holds 1 (token 1795461796665034);
/// * `v1:reserved`: free, a reservation of `erin`;
/// * `v1:string`: the string `hello`.
///
/// The highest token issued was 1795461796669082.
const V1_RDB: &[u8] = include_bytes!("fixtures/v1-exclusive.rdb");
const V1_ALICE: i64 = 1795461796634870;
const V1_DAVE: i64 = 1795461796665034;
const V1_LAST_TOKEN: i64 = 1795461796669082;

/// The lease and reservation time of the workloads: longer than any test.
const LONG: u64 = 600_000;

/// The tolerance on an absolute lease deadline computed from `pttl` (ms).
const SLACK_MS: i64 = 100;

#[test]
fn a_version_1_rdb_still_loads() {
    let mut server = Server::with_files(
        &[("dump.rdb", V1_RDB)],
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    );
    let mut conn = server.connect();
    let ten_years_ish = 300_000_000_000;
    assert_eq!(
        picture(&mut conn, "v1:held"),
        Some((
            Some(b"alice".to_vec()),
            2,
            V1_ALICE,
            strings(&["bob", "carol"]),
            0,
            vec![entry("alice", 2, 0, V1_ALICE)]
        ))
    );
    assert!(info_int(&mut conn, "v1:held", "pttl") > ten_years_ish);
    assert!(holders(&mut conn, "v1:held")[0].pttl > ten_years_ish);
    assert_eq!(
        picture(&mut conn, "v1:plain"),
        Some((
            Some(b"dave".to_vec()),
            1,
            V1_DAVE,
            vec![],
            0,
            vec![entry("dave", 1, 0, V1_DAVE)]
        ))
    );
    assert_eq!(
        picture(&mut conn, "v1:reserved"),
        Some((None, 0, 0, strings(&["erin"]), 0, vec![]))
    );
    let text: String = redis::cmd("GET").arg("v1:string").query(&mut conn).unwrap();
    assert_eq!(text, "hello");

    // The loaded locks work under the new rules.
    let (token, _, _) = shared(&mut conn, "fresh", "x", LONG).unwrap();
    assert!(token > V1_LAST_TOKEN, "the token counter was restored");
    assert_eq!(
        shared(&mut conn, "v1:plain", "dave", LONG),
        Some((V1_DAVE, 1, b"dave".to_vec())),
        "the exclusive holder re-enters shared"
    );
    assert_eq!(shared(&mut conn, "v1:held", "bob", LONG), None);
    assert_eq!(
        shared(&mut conn, "v1:reserved", "zed", LONG),
        None,
        "kept for erin"
    );
    let (erin, _, _) = take(
        &mut conn,
        "DLOCK.FAIR",
        "v1:reserved",
        "erin",
        LONG,
        &["SHARED"],
    )
    .expect("erin claims her reservation");
    assert!(erin > token);

    // And they are saved again in the new encoding.
    let keys = ["v1:held", "v1:plain", "v1:reserved"];
    let before = state_of(&mut conn, &keys);
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    server.restart();
    let mut conn = server.connect();
    assert_same(&before, &state_of(&mut conn, &keys));
    assert_eq!(
        holder_counts(&mut conn, "v1:plain"),
        vec![entry("dave", 1, 1, V1_DAVE)]
    );
}

/// Everything observable about a lock: its picture, each holder's absolute
/// deadline, the key's absolute expire and (when DEBUG is on) its digest.
#[derive(Debug)]
struct State {
    key: String,
    picture: Picture,
    deadlines: Vec<(String, i64)>,
    expire: i64,
    digest: Option<Vec<String>>,
}

fn state_of(conn: &mut Connection, keys: &[&str]) -> Vec<State> {
    keys.iter()
        .map(|key| State {
            key: key.to_string(),
            picture: picture(conn, key),
            deadlines: holder_deadlines(conn, key),
            expire: pexpiretime(conn, key),
            digest: redis::cmd("DEBUG")
                .arg("DIGEST-VALUE")
                .arg(*key)
                .query::<Vec<String>>(conn)
                .ok(),
        })
        .collect()
}

fn assert_same(before: &[State], after: &[State]) {
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(after) {
        assert_eq!(b.key, a.key);
        assert!(b.picture.is_some(), "{} was set up", b.key);
        assert_eq!(
            b.picture, a.picture,
            "{}: holders, counts, tokens, queue",
            b.key
        );
        assert_eq!(b.expire, a.expire, "{}: the key's expire", b.key);
        assert_eq!(b.deadlines.len(), a.deadlines.len());
        for ((owner, was), (_, is)) in b.deadlines.iter().zip(&a.deadlines) {
            assert!(
                (was - is).abs() <= SLACK_MS,
                "{}: {owner}'s lease ended at {was}, now at {is}",
                b.key
            );
        }
        if let (Some(was), Some(is)) = (&b.digest, &a.digest) {
            assert_eq!(
                was, is,
                "{}: the digest (reservation modes and limits too); before {b:?}, after {a:?}",
                b.key
            );
        }
    }
}

const KEYS: &[&str] = &[
    "readers",
    "mixed",
    "downgraded",
    "upgraded",
    "sem",
    "freeres",
];

/// Builds shared holders of every kind; returns the highest token issued.
fn workload(conn: &mut Connection) -> i64 {
    config_set(conn, "dlock.fair-reservation-ms", &LONG.to_string());
    let mut highest = 0;
    let mut note = |grant: Option<Grant>| {
        let (token, _, _) = grant.expect("granted");
        highest = highest.max(token);
    };
    // Three readers with their own leases and counts.
    note(shared(conn, "readers", "r1", 500_000));
    note(shared(conn, "readers", "r1", 500_000));
    note(shared(conn, "readers", "r2", 700_000));
    note(permit(conn, "readers", "r3", 400_000, 5));
    // A writer also holding shared, with reservations of both modes.
    note(exclusive(conn, "mixed", "w", LONG));
    note(shared(conn, "mixed", "w", LONG));
    note(shared(conn, "mixed", "w", LONG));
    assert_eq!(
        take(
            conn,
            "DLOCK.FAIR",
            "mixed",
            "fs",
            LONG,
            &["SHARED", "LIMIT", "3"]
        ),
        None
    );
    assert_eq!(take(conn, "DLOCK.FAIR", "mixed", "fx", LONG, &[]), None);
    assert_eq!(
        take(conn, "DLOCK.FAIR", "mixed", "fu", LONG, &["SHARED"]),
        None
    );
    // A downgrade: exclusive, shared, release of the exclusive hold.
    note(exclusive(conn, "downgraded", "d", LONG));
    note(shared(conn, "downgraded", "d", LONG));
    assert_eq!(release(conn, "downgraded", "d"), 1);
    note(shared(conn, "downgraded", "e", 300_000));
    // An upgrade of a sole reader.
    note(shared(conn, "upgraded", "u", LONG));
    note(exclusive(conn, "upgraded", "u", 500_000));
    // A full semaphore with a reservation waiting for a slot.
    note(permit(conn, "sem", "s1", LONG, 2));
    note(permit(conn, "sem", "s2", 450_000, 2));
    assert_eq!(
        take(
            conn,
            "DLOCK.FAIR",
            "sem",
            "s3",
            LONG,
            &["SHARED", "LIMIT", "2"]
        ),
        None
    );
    // A free lock kept by reservations of both modes.
    note(exclusive(conn, "freeres", "h", LONG));
    assert_eq!(
        take(
            conn,
            "DLOCK.FAIR",
            "freeres",
            "q1",
            LONG,
            &["LIMIT", "1", "SHARED"]
        ),
        None
    );
    assert_eq!(take(conn, "DLOCK.FAIR", "freeres", "q2", LONG, &[]), None);
    assert_eq!(release(conn, "freeres", "h"), 0);
    // Gone again: leaves nothing behind.
    note(shared(conn, "gone", "g", LONG));
    assert_eq!(release_shared(conn, "gone", "g"), 0);
    highest
}

/// The restored locks behave: the reservations still hold their places and
/// the semaphore still counts its holders.
fn check_behaviour(conn: &mut Connection, highest: i64) {
    assert_eq!(info(conn, "gone"), None);
    assert_eq!(holder_counts(conn, "sem").len(), 2);
    assert_eq!(
        permit(conn, "sem", "other", LONG, 3),
        None,
        "s3 is queued first"
    );
    assert_eq!(shared(conn, "freeres", "zed", LONG), None, "kept for q1");
    let (q1, _, _) = take(
        conn,
        "DLOCK.FAIR",
        "freeres",
        "q1",
        LONG,
        &["SHARED", "LIMIT", "1"],
    )
    .expect("q1 claims its place");
    assert!(q1 > highest, "tokens keep increasing after the restart");
    assert_eq!(release_shared(conn, "readers", "r1"), 1);
    assert_eq!(release(conn, "mixed", "w"), 2);
    assert_eq!(int(conn, &["DLOCK.RENEW", "upgraded", "u", "1000"]), {
        holder_counts(conn, "upgraded")[0].3
    });
}

#[test]
fn rdb_restores_shared_holders_and_reservations() {
    let mut server = Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "yes",
    ]);
    let mut conn = server.connect();
    let highest = workload(&mut conn);
    let before = state_of(&mut conn, KEYS);
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    server.restart();
    let mut conn = server.connect();
    assert_same(&before, &state_of(&mut conn, KEYS));
    check_behaviour(&mut conn, highest);
}

fn aof_round_trip(preamble: &str) {
    let mut args = aof_always_args(preamble).to_vec();
    args.extend(["--enable-debug-command", "yes"]);
    let mut server = Server::with_args(&args);
    let mut conn = server.connect();
    workload(&mut conn);
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
    wait_for_info(&mut conn, "persistence", "aof_rewrite_in_progress:0");
    wait_for_info(&mut conn, "persistence", "aof_rewrite_scheduled:0");
    // More changes after the rewrite, replayed from the incremental log.
    let (late, _, _) = shared(&mut conn, "readers", "r4", LONG).unwrap();
    assert_eq!(release_shared(&mut conn, "readers", "r2"), 0);
    assert_eq!(release(&mut conn, "upgraded", "u"), 1);
    assert_eq!(
        take(
            &mut conn,
            "DLOCK.FAIR",
            "sem",
            "s4",
            LONG,
            &["SHARED", "LIMIT", "2"]
        ),
        None
    );
    let before = state_of(&mut conn, KEYS);
    server.kill();
    server.restart();
    let mut conn = server.connect();
    assert_same(&before, &state_of(&mut conn, KEYS));
    check_behaviour(&mut conn, late);
}

#[test]
fn aof_with_rdb_preamble_restores_shared_holders() {
    aof_round_trip("yes");
}

#[test]
fn aof_without_preamble_restores_shared_holders() {
    aof_round_trip("no");
}

#[test]
fn aof_replays_shared_changes_without_a_rewrite() {
    let mut args = aof_always_args("no").to_vec();
    args.extend(["--enable-debug-command", "yes"]);
    let mut server = Server::with_args(&args);
    let mut conn = server.connect();
    let highest = workload(&mut conn);
    let before = state_of(&mut conn, KEYS);
    server.kill();
    server.restart();
    let mut conn = server.connect();
    assert_same(&before, &state_of(&mut conn, KEYS));
    check_behaviour(&mut conn, highest);
}

#[test]
fn the_replica_matches_the_master_after_shared_hand_offs() {
    let master = server_with_debug();
    let replica = replica_of(&master, &["--enable-debug-command", "yes"]);
    let mut conn = master.connect();
    let mut view = replica.connect();
    config_set(&mut conn, "dlock.fair-reservation-ms", &LONG.to_string());

    // A batch of readers after a writer's release; a writer after them.
    exclusive(&mut conn, "batch", "w", LONG).unwrap();
    let r1 = block_shared(&master, "batch", "r1", LONG, 20_000);
    wait_for_waiting(&mut conn, "batch", 1);
    let r2 = block_shared(&master, "batch", "r2", 500_000, 20_000);
    wait_for_waiting(&mut conn, "batch", 2);
    assert_eq!(release(&mut conn, "batch", "w"), 0);
    r1.granted();
    r2.granted();
    // The same batch when the writer's lease ends, and when its SESSION
    // connection is killed.
    exclusive(&mut conn, "batch-expiry", "w", 500).unwrap();
    let mut session = master.connect();
    let session_id = client_id_of(&mut session);
    take(
        &mut session,
        "DLOCK.ACQUIRE",
        "batch-session",
        "w",
        LONG,
        &["SESSION"],
    )
    .unwrap();
    let mut readers = Vec::new();
    for key in ["batch-expiry", "batch-session"] {
        for owner in ["r1", "r2"] {
            readers.push(block_shared(&master, key, owner, LONG, 20_000));
        }
    }
    wait_for_waiting(&mut conn, "batch-session", 2);
    int(
        &mut conn,
        &["CLIENT", "KILL", "ID", &session_id.to_string()],
    );
    for reader in readers {
        reader.granted();
    }
    // A downgrade handing over to a queued reader, with a FAIR SHARED
    // reservation behind a waiting writer.
    exclusive(&mut conn, "down", "d", LONG).unwrap();
    let reader = block_shared(&master, "down", "r", LONG, 20_000);
    wait_for_waiting(&mut conn, "down", 1);
    shared(&mut conn, "down", "d", LONG).unwrap();
    assert_eq!(release(&mut conn, "down", "d"), 1);
    reader.granted();
    // A blocked upgrade granted when the other reader leaves.
    shared(&mut conn, "up", "a", LONG).unwrap();
    shared(&mut conn, "up", "b", LONG).unwrap();
    let upgrade = block_acquire(&master, "up", "a", LONG, 20_000);
    wait_for_waiting(&mut conn, "up", 1);
    assert_eq!(release_shared(&mut conn, "up", "b"), 0);
    upgrade.granted();
    // A semaphore: one permit ends by lease expiry, one by a killed SESSION
    // connection; each is handed to the next in line.
    let mut session = master.connect();
    let session_id = client_id_of(&mut session);
    take(
        &mut session,
        "DLOCK.ACQUIRE",
        "sem",
        "crashy",
        LONG,
        &["SHARED", "LIMIT", "2", "SESSION"],
    )
    .unwrap();
    permit(&mut conn, "sem", "lapsed", 300, 2).unwrap();
    let next = block_with(
        &master,
        "sem",
        "next",
        LONG,
        20_000,
        &["SHARED", "LIMIT", "2"],
    );
    next.granted();
    let last = block_with(
        &master,
        "sem",
        "last",
        LONG,
        20_000,
        &["SHARED", "LIMIT", "2"],
    );
    wait_for_waiting(&mut conn, "sem", 1);
    int(
        &mut conn,
        &["CLIENT", "KILL", "ID", &session_id.to_string()],
    );
    last.granted();
    assert_eq!(
        take(
            &mut conn,
            "DLOCK.FAIR",
            "sem",
            "res",
            LONG,
            &["SHARED", "LIMIT", "2"]
        ),
        None
    );
    // A key deleted under its readers' writer.
    exclusive(&mut conn, "deleted", "x", LONG).unwrap();
    let y = block_shared(&master, "deleted", "y", LONG, 20_000);
    wait_for_waiting(&mut conn, "deleted", 1);
    int(&mut conn, &["DEL", "deleted"]);
    y.granted();
    wait_for_blocked_clients(&mut conn, 0);

    let keys = [
        "batch",
        "down",
        "up",
        "sem",
        "deleted",
        "batch-expiry",
        "batch-session",
    ];
    wait_for_replica(&mut conn);
    let on_master = state_of(&mut conn, &keys);
    let on_replica = state_of(&mut view, &keys);
    let differing: Vec<String> = on_master
        .iter()
        .zip(&on_replica)
        .filter(|(m, r)| m.picture != r.picture)
        .map(|(m, r)| format!("{}: master {:?}, replica {:?}", m.key, m.picture, r.picture))
        .collect();
    assert!(
        differing.is_empty(),
        "the replica differs from the master:\n{}",
        differing.join("\n")
    );
    assert_same(&on_master, &on_replica);
    assert_eq!(
        on_replica[3]
            .picture
            .as_ref()
            .unwrap()
            .5
            .iter()
            .map(|h| h.0.as_str())
            .collect::<Vec<_>>(),
        ["next", "last"]
    );
    assert_eq!(on_replica[3].picture.as_ref().unwrap().3, strings(&["res"]));
}

#[test]
fn copy_dump_digest_and_memory_usage_of_shared_locks() {
    let server = server_with_debug();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.fair-reservation-ms", &LONG.to_string());
    exclusive(&mut conn, "a", "w", LONG).unwrap();
    let first = digest(&mut conn, "a");
    shared(&mut conn, "a", "w", LONG).unwrap();
    let second = digest(&mut conn, "a");
    assert_ne!(first, second, "the digest covers the shared count");
    assert_eq!(release(&mut conn, "a", "w"), 1);
    shared(&mut conn, "a", "r", 300_000).unwrap();
    // Reservations of both modes (an exclusive one, and a shared one with a
    // limit behind it).
    assert_eq!(take(&mut conn, "DLOCK.FAIR", "a", "f", LONG, &[]), None);
    assert_eq!(
        take(
            &mut conn,
            "DLOCK.FAIR",
            "a",
            "g",
            LONG,
            &["SHARED", "LIMIT", "9"]
        ),
        None
    );
    assert_eq!(queue(&mut conn, "a"), strings(&["f", "g"]));
    let third = digest(&mut conn, "a");

    assert_eq!(int(&mut conn, &["COPY", "a", "b"]), 1);
    let original = state_of(&mut conn, &["a"]);
    let mut copy = state_of(&mut conn, &["b"]);
    copy[0].key = "a".to_string();
    assert_same(&original, &copy);
    assert_eq!(digest(&mut conn, "b"), third);
    assert_eq!(release_shared(&mut conn, "b", "r"), 0);
    assert_eq!(
        holder_counts(&mut conn, "a").len(),
        2,
        "the copy is independent"
    );

    // RESTORE with the same absolute expire: the digest covers the key's
    // expire too.
    let dump: Vec<u8> = redis::cmd("DUMP").arg("a").query(&mut conn).unwrap();
    let expire = pexpiretime(&mut conn, "a");
    let _: () = redis::cmd("RESTORE")
        .arg("c")
        .arg(expire)
        .arg(dump)
        .arg("ABSTTL")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        digest(&mut conn, "c"),
        third,
        "DUMP/RESTORE keeps everything"
    );
    assert_eq!(holder_counts(&mut conn, "c"), holder_counts(&mut conn, "a"));

    // Memory grows with the readers.
    shared(&mut conn, "one", "reader-0", LONG).unwrap();
    for i in 0..100 {
        shared(&mut conn, "many", &format!("reader-{i}"), LONG).unwrap();
    }
    let one = int(&mut conn, &["MEMORY", "USAGE", "one"]);
    let many = int(&mut conn, &["MEMORY", "USAGE", "many"]);
    assert!(
        many >= one + 99 * 8,
        "memory usage counts the readers: {one} vs {many}"
    );

    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut conn).unwrap();
    assert_eq!(
        digest(&mut conn, "a"),
        third,
        "DEBUG RELOAD round-trips the value"
    );
    assert_eq!(shared_owners(&mut conn, "many"), 100);
}

/// Locks that differ only in the mode or limit of a reservation, made from
/// an AOF (the only way to build them side by side): their digests differ,
/// so the digest equalities above cover reservation modes and limits; and an
/// AOF rewrite without preamble, then an RDB, keep each of them.
#[test]
fn reservation_modes_and_limits_survive_aof_rewrite_and_rdb() {
    let deadline = (now_ms() + 3_600_000).to_string();
    let mut aof = Vec::new();
    for (key, extra) in [
        ("exclusive", &[][..]),
        ("unbounded", &["SHARED", "0"][..]),
        ("limit3", &["SHARED", "3"][..]),
        ("limit4", &["SHARED", "4"][..]),
    ] {
        aof.extend(resp_command(&[
            "DLOCK.SETSTATE",
            key,
            "HOLD",
            "h",
            "1",
            "77",
            &deadline,
        ]));
        let mut reserve = vec!["DLOCK.SETSTATE", key, "RESERVE", "q", &deadline];
        reserve.extend_from_slice(extra);
        aof.extend(resp_command(&reserve));
    }
    let keys = ["exclusive", "unbounded", "limit3", "limit4"];
    let mut server = Server::with_files(
        &[("appendonly.aof", &aof)],
        &[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--aof-use-rdb-preamble",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    );
    let mut conn = server.connect();
    let digests: Vec<Vec<String>> = keys.iter().map(|k| digest(&mut conn, k)).collect();
    for i in 0..keys.len() {
        for j in i + 1..keys.len() {
            assert_ne!(digests[i], digests[j], "{} and {}", keys[i], keys[j]);
        }
        assert_eq!(queue(&mut conn, keys[i]), strings(&["q"]));
    }
    let before = state_of(&mut conn, &keys);
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
    wait_for_info(&mut conn, "persistence", "aof_rewrite_in_progress:0");
    wait_for_info(&mut conn, "persistence", "aof_rewrite_scheduled:0");
    server.restart();
    let mut conn = server.connect();
    assert_same(&before, &state_of(&mut conn, &keys));
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    server.restart_with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "yes",
    ]);
    let mut conn = server.connect();
    assert_same(&before, &state_of(&mut conn, &keys));
}

/// The AOF logs the same effects as the replication stream: after a batch
/// of readers follows a sole writer (release or SESSION close), a restart
/// from the AOF must not bring the writer back beside them.
#[test]
fn aof_restores_a_batch_hand_off_without_the_old_writer() {
    let mut server = Server::with_args(&aof_always_args("no"));
    let mut conn = server.connect();
    exclusive(&mut conn, "batch", "w", LONG).unwrap();
    let mut session = server.connect();
    let session_id = client_id_of(&mut session);
    take(
        &mut session,
        "DLOCK.ACQUIRE",
        "batch-session",
        "w",
        LONG,
        &["SESSION"],
    )
    .unwrap();
    let mut readers = Vec::new();
    for key in ["batch", "batch-session"] {
        for (queued, owner) in ["r1", "r2"].iter().enumerate() {
            readers.push(block_shared(&server, key, owner, LONG, 20_000));
            wait_for_waiting(&mut conn, key, queued as i64 + 1);
        }
    }
    assert_eq!(release(&mut conn, "batch", "w"), 0);
    int(
        &mut conn,
        &["CLIENT", "KILL", "ID", &session_id.to_string()],
    );
    for reader in readers {
        reader.granted();
    }
    let keys = ["batch", "batch-session"];
    let before: Vec<Picture> = keys.iter().map(|k| picture(&mut conn, k)).collect();
    for picture in &before {
        let owners: Vec<&str> = picture
            .as_ref()
            .unwrap()
            .5
            .iter()
            .map(|h| h.0.as_str())
            .collect();
        assert_eq!(owners, ["r1", "r2"]);
    }
    server.kill();
    server.restart();
    let mut conn = server.connect();
    let after: Vec<Picture> = keys.iter().map(|k| picture(&mut conn, k)).collect();
    assert_eq!(after, before, "the AOF brought back the old writer");
}
