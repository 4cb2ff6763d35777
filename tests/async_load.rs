//! Loading dlock leaves Redis as it was: a replica configured for diskless
//! `swapdb` (or `on-empty-db`) loading keeps loading from the socket, serves
//! its old locks while it loads its master's data set beside them, ends with
//! the master's locks, and an aborted load leaves no trace; commands on keys
//! that are not locks change the server's statistics exactly as on a server
//! without the module.

use crate::common;

use common::*;
use std::time::Duration;

/// The replica log line Redis writes when a module keeps it from loading
/// diskless.
const FALLBACK_TO_DISK: &str = "Skipping diskless-load";
/// The replica log line of a diskless load (Redis 7.0 and Valkey).
const DISKLESS_LOAD: &str = "to parser";

fn master() -> Server {
    Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--repl-diskless-sync",
        "yes",
        // Each full sync starts at once instead of after 5 s (the default
        // delay), so that the two syncs of the setup fit well inside the
        // lease of `short` (they did not, 3 times in a row, on Redis 7.0).
        "--repl-diskless-sync-delay",
        "0",
    ])
}

/// DLOCK.INFO fields of `key`, the leases left (`pttl`, and the fifth
/// element of each `holders` entry) left out.
fn state_without_pttl(conn: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    info(conn, key).map(|fields| {
        fields
            .into_iter()
            .filter(|(name, _)| name != "pttl")
            .map(|(name, value)| match (name.as_str(), value) {
                ("holders", Value::Array(holders)) => {
                    let holders = holders
                        .into_iter()
                        .map(|holder| match holder {
                            Value::Array(mut fields) if fields.len() > 4 => {
                                fields.remove(4);
                                Value::Array(fields)
                            }
                            other => other,
                        })
                        .collect();
                    (name, Value::Array(holders))
                }
                (_, value) => (name, value),
            })
            .collect()
    })
}

fn pttl_of(conn: &mut Connection, key: &str) -> i64 {
    info_int(conn, key, "pttl")
}

/// Every lock of `keys` is the same on both sides: every DLOCK.INFO field,
/// the key's absolute expire, and the lease within a second.
fn assert_same_locks(master: &mut Connection, replica: &mut Connection, keys: &[&str]) {
    for key in keys {
        let expected = state_without_pttl(master, key);
        assert_eq!(state_without_pttl(replica, key), expected, "{key}");
        assert_eq!(pexpiretime(replica, key), pexpiretime(master, key), "{key}");
        if expected.is_some() && info_owner(master, key).is_some() {
            let (on_master, on_replica) = (pttl_of(master, key), pttl_of(replica, key));
            assert!(
                (on_master - on_replica).abs() <= 1_000,
                "{key}: lease {on_master} ms on the master, {on_replica} ms on the replica"
            );
        }
    }
}

/// Locks of every kind on `conn`'s server: held, re-entered, queued with a
/// FAIR reservation, and a SESSION hold on `session` (keep it open).
fn populate(conn: &mut Connection, session: &mut Connection) -> Vec<&'static str> {
    acquire(conn, "held", "A", 60_000).unwrap();
    acquire(conn, "reentered", "A", 60_000).unwrap();
    acquire(conn, "reentered", "A", 60_000).unwrap();
    acquire(conn, "reserved", "A", 60_000).unwrap();
    assert_eq!(fair(conn, "reserved", "B", 60_000), None);
    assert_eq!(fair(conn, "reserved", "C", 60_000), None);
    let reply = cmd(
        session,
        &["DLOCK.ACQUIRE", "session", "S", "60000", "SESSION"],
    )
    .unwrap();
    assert!(grant(reply).is_some());
    vec!["held", "reentered", "reserved", "session", "missing"]
}

fn last_token(conn: &mut Connection) -> i64 {
    info_number(conn, "dlock", "dlock_last_token")
}

fn assert_loaded_diskless(replica: &Server) {
    let log = replica.log();
    assert!(
        !log.contains(FALLBACK_TO_DISK),
        "the replica fell back to loading from disk:\n{log}"
    );
    assert!(
        log.contains(DISKLESS_LOAD),
        "no diskless load in the log:\n{log}"
    );
}

#[test]
fn a_diskless_replica_loads_from_the_socket_and_ends_with_the_masters_locks() {
    for mode in ["swapdb", "on-empty-db"] {
        let master = master();
        let mut conn = master.connect();
        let mut session = master.connect();
        let keys = populate(&mut conn, &mut session);
        let replica = replica_of(&master, &["--repl-diskless-load", mode]);
        let mut on_replica = replica.connect();
        wait_for_replica(&mut conn);
        assert_loaded_diskless(&replica);
        assert_same_locks(&mut conn, &mut on_replica, &keys);
        assert_eq!(queue(&mut on_replica, "reserved"), strings(&["B", "C"]));
        assert!(
            last_token(&mut on_replica) >= last_token(&mut conn),
            "{mode}: the replica's token counter is below the master's"
        );
        drop(session);
    }
}

/// A replica (`repl-diskless-load swapdb`) in sync with a master holding
/// `old` locks, and a master-side change to new locks that forces a full
/// sync with the same replication id (async loading), transferred slowly.
struct AsyncLoad {
    master: Server,
    replica: Server,
    master_conn: Connection,
    replica_conn: Connection,
    /// Token of `old` before the load.
    old_token: i64,
    /// The replica's token counter before the load.
    replica_last_token: i64,
    /// The master's token counter with the new locks.
    master_last_token: i64,
}

/// `key_delay_us` is the master's `rdb-key-save-delay` during the load: the
/// transfer of its ~1,000 keys lasts about `key_delay_us` milliseconds.
fn start_async_load(short_lease_ms: u64, key_delay_us: u64) -> AsyncLoad {
    let master = master();
    let mut master_conn = master.connect();
    // B's reservation must outlast the whole setup and load, which take
    // seconds (more on a loaded machine) against the default 5 s.
    config_set(&mut master_conn, "dlock.fair-reservation-ms", "60000");
    let (old_token, _, _) = acquire(&mut master_conn, "old", "A", 60_000).unwrap();
    acquire(&mut master_conn, "short", "A", short_lease_ms).unwrap();
    assert_eq!(fair(&mut master_conn, "old", "B", 60_000), None);
    // The replica answers clients between chunks of 1 KB it loads (2 MB by
    // default).
    let replica = replica_of(
        &master,
        &[
            "--repl-diskless-load",
            "swapdb",
            "--loading-process-events-interval-bytes",
            "1024",
        ],
    );
    let mut replica_conn = replica.connect();
    wait_for_replica(&mut master_conn);
    // Enough values to make the transfer last seconds at 3 ms per key, and
    // large enough that the master streams them as it goes.
    let value = "v".repeat(4_096);
    for chunk in 0..10 {
        let mut pipe = redis::pipe();
        for i in 0..100 {
            pipe.cmd("SET")
                .arg(format!("filler:{chunk}:{i}"))
                .arg(&value)
                .ignore();
        }
        let _: () = pipe.query(&mut master_conn).unwrap();
    }
    wait_for_replica(&mut master_conn);
    let replica_last_token = last_token(&mut replica_conn);
    config_set(
        &mut master_conn,
        "rdb-key-save-delay",
        &key_delay_us.to_string(),
    );
    // As Redis's own suite does: drop the replica and overflow the backlog,
    // so that it must sync fully, with the same replication id.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .ignore()
        .cmd("CONFIG")
        .arg("SET")
        .arg("repl-backlog-size")
        .arg("16384")
        .ignore()
        .cmd("DLOCK.RELEASE")
        .arg("old")
        .arg("A")
        .ignore()
        .cmd("DLOCK.ACQUIRE")
        .arg("new")
        .arg("N")
        .arg("60000")
        .ignore();
    for i in 0..10 {
        pipe.cmd("SET")
            .arg(format!("backlog:{i}"))
            .arg("A".repeat(16_384))
            .ignore();
    }
    let _: () = pipe.query(&mut master_conn).unwrap();
    let master_last_token = last_token(&mut master_conn);
    wait_for_info(&mut replica_conn, "persistence", "async_loading:1");
    AsyncLoad {
        master,
        replica,
        master_conn,
        replica_conn,
        old_token,
        replica_last_token,
        master_last_token,
    }
}

/// The replica still shows the locks it had before the load.
fn assert_old_locks(load: &mut AsyncLoad, what: &str) {
    let conn = &mut load.replica_conn;
    assert_eq!(info_owner(conn, "old"), Some(b"A".to_vec()), "{what}");
    assert_eq!(info_int(conn, "old", "token"), load.old_token, "{what}");
    assert_eq!(queue(conn, "old"), strings(&["B"]), "{what}");
    assert_eq!(info(conn, "new"), None, "{what}");
    assert_eq!(last_token(conn), load.replica_last_token, "{what}");
}

#[test]
fn during_an_async_load_the_replica_serves_its_old_locks_then_the_masters() {
    let mut load = start_async_load(60_000, 3_000);
    assert_old_locks(&mut load, "while loading");
    assert_eq!(
        info_field(&mut load.replica_conn, "persistence", "async_loading"),
        "1",
        "the load was still running during the checks"
    );
    config_set(&mut load.master_conn, "rdb-key-save-delay", "0");
    wait_for_info(&mut load.replica_conn, "persistence", "async_loading:0");
    wait_for_info(
        &mut load.replica_conn,
        "replication",
        "master_link_status:up",
    );
    wait_for_replica(&mut load.master_conn);
    assert_loaded_diskless(&load.replica);
    assert_same_locks(
        &mut load.master_conn,
        &mut load.replica_conn,
        &["old", "new", "short"],
    );
    assert_eq!(info_owner(&mut load.replica_conn, "old"), None);
    assert_eq!(queue(&mut load.replica_conn, "old"), strings(&["B"]));
    assert_eq!(
        info_owner(&mut load.replica_conn, "new"),
        Some(b"N".to_vec())
    );
    assert!(last_token(&mut load.replica_conn) >= load.master_last_token);
    drop(load.master);
}

/// An async load aborted by the master's death (its `short` lock with a
/// lease of `lease_ms`), checked, and the replica promoted.
fn aborted_async_load(lease_ms: u64) -> AsyncLoad {
    // A transfer of ~20 s: the load is certainly still running when the
    // master dies, whatever the machine's load.
    let mut load = start_async_load(lease_ms, 20_000);
    // The master's fork streams the data set: on Redis 8 (RDB channel) it
    // writes to the replica's socket itself and holds the main channel
    // open, so it would finish the transfer of a master killed alone.
    load.master.kill_with_forks();
    wait_for_info(&mut load.replica_conn, "persistence", "async_loading:0");
    assert_loaded_diskless(&load.replica);
    let log = load.replica.log();
    assert_eq!(
        log.matches("sync: Finished with success").count(),
        1,
        "the second load completed instead of being aborted:\n{log}"
    );
    assert_old_locks(&mut load, "after the aborted load");
    assert!(load.master_last_token > load.replica_last_token);

    // Promoted, the replica runs the old locks: `short` ends once and is
    // handed to its waiter exactly once.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut load.replica_conn)
        .unwrap();
    load
}

#[test]
fn an_aborted_async_load_leaves_the_old_locks_and_nothing_else() {
    // `short` ends its lease after the load has been aborted and the
    // replica promoted. On a machine so loaded that the setup outlives that
    // lease, the attempt proves nothing and is made again. The setup takes
    // up to ~10 s on Valkey (seen on an idle machine), hence 20 s.
    let lease_ms = 20_000;
    let mut attempts = 0;
    let mut load = loop {
        attempts += 1;
        let started = std::time::Instant::now();
        let load = aborted_async_load(lease_ms);
        if started.elapsed() < Duration::from_millis(lease_ms - 2_000) {
            break load;
        }
        assert!(
            attempts < 3,
            "the setup outlived the lease it meant to watch {attempts} times"
        );
        eprintln!(
            "the setup outlived the lease it meant to watch ({:?}): again",
            started.elapsed()
        );
    };
    let before_handoffs = info_number(&mut load.replica_conn, "dlock", "dlock_handoffs");
    let before_expiries = info_number(&mut load.replica_conn, "dlock", "dlock_lease_expiries");
    let waiter = block_acquire(&load.replica, "short", "W", 60_000, 30_000);
    let ((token, holds, owner), _) = waiter.granted();
    assert_eq!((holds, owner), (1, b"W".to_vec()));
    assert!(token > load.replica_last_token);
    std::thread::sleep(Duration::from_millis(200));
    let conn = &mut load.replica_conn;
    assert_eq!(
        info_number(conn, "dlock", "dlock_handoffs"),
        before_handoffs + 1
    );
    assert_eq!(
        info_number(conn, "dlock", "dlock_lease_expiries"),
        before_expiries + 1
    );
    assert_eq!(info_owner(conn, "short"), Some(b"W".to_vec()));
    assert_eq!(release(conn, "short", "W"), 0);
    assert_eq!(info(conn, "short"), None);
    // The old lock is still the old one, and new tokens continue from the
    // replica's own counter.
    assert_eq!(info_int(conn, "old", "token"), load.old_token);
    assert!(!load.replica.log().contains("panicked"));
}

/// Statistics of a non-lock key after RENAME, MOVE and COPY: keyspace hits
/// and misses, and the key's LFU frequency, on a server whose LFU counter
/// rises by one on every access.
fn statistics_after_moves(server: &Server) -> Vec<String> {
    let mut conn = server.connect();
    config_set(&mut conn, "maxmemory-policy", "allkeys-lfu");
    config_set(&mut conn, "lfu-log-factor", "0");
    config_set(&mut conn, "lfu-decay-time", "0");
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("other")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let mut seen = Vec::new();
    let mut stats = |conn: &mut Connection, what: &str, db: i64, key: &str| {
        let _: () = redis::cmd("SELECT").arg(db).query(conn).unwrap();
        let freq = cmd(conn, &["OBJECT", "FREQ", key]).unwrap();
        let _: () = redis::cmd("SELECT").arg(0).query(conn).unwrap();
        seen.push(format!(
            "{what}: hits {} misses {} freq {freq:?}",
            info_field(conn, "stats", "keyspace_hits"),
            info_field(conn, "stats", "keyspace_misses"),
        ));
    };
    cmd(&mut conn, &["RENAME", "plain", "renamed"]).unwrap();
    stats(&mut conn, "RENAME", 0, "renamed");
    cmd(&mut conn, &["RENAME", "renamed", "other"]).unwrap();
    stats(&mut conn, "RENAME over a key", 0, "other");
    cmd(&mut conn, &["MOVE", "other", "1"]).unwrap();
    stats(&mut conn, "MOVE", 1, "other");
    let _: () = redis::cmd("SELECT").arg(1).query(&mut conn).unwrap();
    cmd(&mut conn, &["COPY", "other", "copied"]).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(&mut conn).unwrap();
    stats(&mut conn, "COPY", 1, "copied");
    stats(&mut conn, "COPY source", 1, "other");
    cmd(&mut conn, &["RENAME", "missing", "nowhere"]).unwrap_err();
    stats(&mut conn, "RENAME of a missing key", 0, "plain");
    // IDLETIME under an LRU policy: the key was just touched on both.
    config_set(&mut conn, "maxmemory-policy", "allkeys-lru");
    let _: () = redis::cmd("SET")
        .arg("fresh")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    cmd(&mut conn, &["RENAME", "fresh", "fresher"]).unwrap();
    let idle = cmd(&mut conn, &["OBJECT", "IDLETIME", "fresher"]).unwrap();
    seen.push(format!("IDLETIME {idle:?}"));
    seen.push(format!(
        "hits {} misses {}",
        info_field(&mut conn, "stats", "keyspace_hits"),
        info_field(&mut conn, "stats", "keyspace_misses"),
    ));
    seen
}

#[test]
fn rename_move_and_copy_change_statistics_of_other_keys_as_without_dlock() {
    let plain = Server::without_module(&[]);
    let expected = statistics_after_moves(&plain);
    let with_dlock = Server::start();
    // A lock in the keyspace, so that the module has something to watch.
    let mut conn = with_dlock.connect();
    acquire(&mut conn, "lock", "A", 60_000).unwrap();
    let seen = statistics_after_moves(&with_dlock);
    assert_eq!(seen, expected);
}

fn hits_and_misses(conn: &mut Connection) -> (String, String) {
    (
        info_field(conn, "stats", "keyspace_hits"),
        info_field(conn, "stats", "keyspace_misses"),
    )
}

#[test]
fn work_the_module_does_on_its_own_leaves_lock_key_statistics_alone() {
    let server = Server::start();
    let mut conn = server.connect();
    let zero = ("0".to_string(), "0".to_string());

    // A lease ends with a waiter queued: the timer hands the lock on.
    acquire(&mut conn, "short", "A", 300).unwrap();
    let waiter = block_acquire(&server, "short", "W", 60_000, 10_000);
    wait_for_waiting(&mut conn, "short", 1);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    waiter.granted();
    assert_eq!(hits_and_misses(&mut conn), zero, "lease-expiry hand-off");

    // SWAPDB moves a lock with a waiter: the module takes the waiter out.
    acquire(&mut conn, "job", "A", 60_000).unwrap();
    let waiter = block_acquire(&server, "job", "B", 60_000, 10_000);
    wait_for_waiting(&mut conn, "job", 1);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    cmd(&mut conn, &["SWAPDB", "0", "1"]).unwrap();
    waiter.refused();
    assert_eq!(hits_and_misses(&mut conn), zero, "SWAPDB");
}
