//! The statistics of `INFO dlock`: gauges (what is stored, held and waiting
//! now), counters (grants by cause, releases, renewals, expiries, NOTOWNER
//! replies, OOM refusals) and the wait histogram, with exact values after
//! known sequences; `DLOCK.STATS RESET`; the gauges after RDB load, DEL,
//! FLUSHALL, expiry, SWAPDB, COPY and on a replica. Runs on every server
//! of `make test` (Redis 7.0, Redis 8, Valkey).

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// Every numeric field of `INFO dlock`, without the `dlock_` prefix.
fn dlock_info(conn: &mut Connection) -> BTreeMap<String, u64> {
    let section: String = redis::cmd("INFO").arg("dlock").query(conn).unwrap();
    section
        .lines()
        .filter_map(|line| line.trim().strip_prefix("dlock_"))
        .filter_map(|line| line.split_once(':'))
        .filter_map(|(name, value)| Some((name.to_string(), value.parse().ok()?)))
        .collect()
}

fn field(conn: &mut Connection, name: &str) -> u64 {
    let fields = dlock_info(conn);
    *fields
        .get(name)
        .unwrap_or_else(|| panic!("INFO dlock has no dlock_{name}: {fields:?}"))
}

/// The gauges: (locks, latches, holders).
fn gauges(conn: &mut Connection) -> (u64, u64, u64) {
    (
        field(conn, "locks"),
        field(conn, "latches"),
        field(conn, "holders"),
    )
}

const BUCKETS: [&str; 9] = ["1", "5", "10", "50", "250", "1000", "5000", "30000", "inf"];

/// The wait histogram's cumulative buckets, in order.
fn buckets(conn: &mut Connection) -> Vec<u64> {
    let fields = dlock_info(conn);
    BUCKETS
        .iter()
        .map(|bound| fields[&format!("wait_ms_le_{bound}")])
        .collect()
}

/// The counters `DLOCK.STATS RESET` zeroes.
const COUNTERS: &[&str] = &[
    "acquires",
    "reentries",
    "releases",
    "renewals",
    "handoffs",
    "lease_expiries",
    "block_timeouts",
    "shared_grants",
    "deadlocks",
    "reservations_made",
    "grace_deferred",
    "grace_windows",
    "latches_created",
    "countdowns",
    "latches_opened",
    "await_timeouts",
    "multi_acquires",
    "multi_handoffs",
    "watch_wakeups",
    "grants_immediate",
    "grants_handoff",
    "grants_after_expiry",
    "notowner_replies",
    "oom_refusals",
    "wait_ms_sum",
    "wait_ms_count",
];

/// The sequence: two grants at once, one hand-off after a wait of
/// about 100 ms, one lease expiry, one NOTOWNER; every new field exact.
#[test]
fn a_known_sequence_gives_exact_values() {
    let server = Server::start();
    let mut conn = server.connect();
    let fresh = dlock_info(&mut conn);
    for name in COUNTERS.iter().chain(&["locks", "latches", "holders"]) {
        assert_eq!(fresh.get(*name), Some(&0), "dlock_{name} at start");
    }
    assert_eq!(buckets(&mut conn), vec![0; 9]);

    acquire(&mut conn, "a", "first", 60_000).unwrap();
    acquire(&mut conn, "b", "other", 60_000).unwrap();
    assert_eq!(gauges(&mut conn), (2, 0, 2));

    let waiter = block_acquire(&server, "a", "second", 60_000, 10_000);
    wait_until("the waiter to block", || {
        field(&mut conn, "blocked_clients") == 1
    });
    // The wait the histogram must measure: at least 100 ms (not a
    // synchronisation: the length of the wait is what is tested).
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(release(&mut conn, "a", "first"), 0);
    let sent = waiter.sent;
    let (_, granted_at) = waiter.granted();
    // The most the server can have measured: from the send to the reply.
    let waited_ms = granted_at.duration_since(sent).as_millis() as u64;

    acquire(&mut conn, "short", "gone", 50).unwrap();
    wait_until("Redis to expire the short lease", || {
        int(&mut conn, &["EXISTS", "short"]) == 0
    });
    assert_eq!(
        error_of(&mut conn, &["DLOCK.RELEASE", "short", "gone"]),
        "NOTOWNER the lock is not held by this owner (free, expired, or held by another owner)"
    );

    let info = dlock_info(&mut conn);
    assert_eq!(info["grants_immediate"], 3, "{info:?}");
    assert_eq!(info["grants_handoff"], 1);
    assert_eq!(info["grants_after_expiry"], 0);
    assert_eq!(info["handoffs"], 1);
    assert_eq!(info["releases"], 1);
    assert_eq!(info["renewals"], 0);
    assert_eq!(info["lease_expiries"], 1);
    assert_eq!(info["notowner_replies"], 1);
    assert_eq!(info["oom_refusals"], 0);
    assert_eq!(info["block_timeouts"], 0);
    assert_eq!(info["blocked_clients"], 0);
    assert_eq!((info["locks"], info["latches"], info["holders"]), (2, 0, 2));
    // One wait, of 100 ms or a little more: in the (50, 250] bucket unless
    // the machine stalled the grant past 250 ms, then in the next.
    assert_eq!(info["wait_ms_count"], 1);
    let sum = info["wait_ms_sum"];
    assert!(
        (100..=waited_ms + 1).contains(&sum),
        "sum {sum}, waited {waited_ms}"
    );
    let cumulative = buckets(&mut conn);
    assert_eq!(&cumulative[..4], &[0, 0, 0, 0], "{cumulative:?}");
    let first = cumulative.iter().position(|&count| count == 1).unwrap();
    let bound: u64 = BUCKETS[first].parse().unwrap_or(u64::MAX);
    let below: u64 = BUCKETS[first - 1].parse().unwrap();
    assert!(
        below <= sum && sum <= bound,
        "{sum} ms in bucket le_{bound}"
    );
    assert!(cumulative[first..].iter().all(|&count| count == 1));
    if waited_ms < 240 {
        assert_eq!(BUCKETS[first], "250", "a wait of {sum} ms");
    }

    // DLOCK.STATS RESET zeroes the counters, not the gauges.
    assert_eq!(
        cmd(&mut conn, &["DLOCK.STATS", "RESET"]).unwrap(),
        Value::Okay
    );
    let reset = dlock_info(&mut conn);
    for name in COUNTERS {
        assert_eq!(reset.get(*name), Some(&0), "dlock_{name} after RESET");
    }
    assert_eq!(buckets(&mut conn), vec![0; 9]);
    assert_eq!(
        (reset["locks"], reset["latches"], reset["holders"]),
        (2, 0, 2)
    );
    assert!(reset["last_token"] > 0, "the token counter is no statistic");
}

/// A waiter granted because the holder's lease ran out counts as
/// `grants_after_expiry`; one that times out counts in the histogram too.
#[test]
fn a_grant_after_an_expiry_and_a_timeout_are_told_apart() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "k", "stalled", 300).unwrap();
    let waiter = block_acquire(&server, "k", "next", 60_000, 10_000);
    waiter.granted();
    let timed_out = block_acquire(&server, "k", "late", 60_000, 30);
    timed_out.refused();
    let info = dlock_info(&mut conn);
    assert_eq!(info["grants_after_expiry"], 1, "{info:?}");
    assert_eq!(info["grants_handoff"], 0);
    assert_eq!(info["handoffs"], 1);
    assert_eq!(info["lease_expiries"], 1);
    assert_eq!(info["block_timeouts"], 1);
    assert_eq!(info["wait_ms_count"], 2);
    assert_eq!(info["wait_ms_le_inf"], 2);
    // The timed-out wait (30 ms) and the granted one (up to the 300 ms lease).
    assert_eq!(info["wait_ms_le_10"], 0);
    assert!(info["wait_ms_le_1000"] == 2 || info["wait_ms_le_5000"] == 2);
    assert_eq!((info["locks"], info["holders"]), (1, 1));
}

/// Shared holders and renewals, re-entries (not new holders), latches.
#[test]
fn holders_count_every_owner_and_latches_are_counted() {
    let server = Server::start();
    let mut conn = server.connect();
    for owner in ["r1", "r2", "r3"] {
        cmd(
            &mut conn,
            &["DLOCK.ACQUIRE", "rw", owner, "60000", "SHARED"],
        )
        .unwrap();
    }
    acquire(&mut conn, "x", "w", 60_000).unwrap();
    acquire(&mut conn, "x", "w", 60_000).unwrap();
    int(&mut conn, &["DLOCK.RENEW", "x", "w", "60000"]);
    assert_eq!(gauges(&mut conn), (2, 0, 4));
    cmd(&mut conn, &["DLOCK.LATCH", "l1", "2", "60000"]).unwrap();
    cmd(&mut conn, &["DLOCK.LATCH", "l2", "1", "60000"]).unwrap();
    assert_eq!(gauges(&mut conn), (2, 2, 4));
    cmd(&mut conn, &["DLOCK.COUNTDOWN", "l2"]).unwrap();
    int(&mut conn, &["DLOCK.RELEASE", "rw", "r2", "SHARED"]);
    assert_eq!(gauges(&mut conn), (2, 1, 3));
    let info = dlock_info(&mut conn);
    assert_eq!(info["grants_immediate"], 4);
    assert_eq!(info["reentries"], 1);
    assert_eq!(info["renewals"], 1);
    assert_eq!(info["releases"], 1);
}

/// The gauges follow keys however they go: DEL, UNLINK, overwrite, COPY,
/// RESTORE, SWAPDB, MOVE, FLUSHDB, FLUSHALL (also ASYNC), expiry.
#[test]
fn gauges_follow_every_way_keys_come_and_go() {
    let server = Server::start();
    let mut conn = server.connect();
    for key in ["a", "b", "c"] {
        acquire(&mut conn, key, "me", 60_000).unwrap();
    }
    cmd(&mut conn, &["DLOCK.LATCH", "l", "3", "60000"]).unwrap();
    assert_eq!(gauges(&mut conn), (3, 1, 3));
    int(&mut conn, &["DEL", "a"]);
    int(&mut conn, &["UNLINK", "l"]);
    assert_eq!(gauges(&mut conn), (2, 0, 2));
    cmd(&mut conn, &["SET", "b", "string now"]).unwrap();
    assert_eq!(gauges(&mut conn), (1, 0, 1));
    int(&mut conn, &["COPY", "c", "c2"]);
    assert_eq!(gauges(&mut conn), (2, 0, 2));
    let dump = match cmd(&mut conn, &["DUMP", "c"]).unwrap() {
        Value::BulkString(bytes) => bytes,
        other => panic!("DUMP: {other:?}"),
    };
    let restored: Value = redis::cmd("RESTORE")
        .arg("c3")
        .arg(0)
        .arg(dump.as_slice())
        .query(&mut conn)
        .unwrap();
    assert_eq!(restored, Value::Okay);
    assert_eq!(gauges(&mut conn), (3, 0, 3));
    cmd(&mut conn, &["SWAPDB", "0", "1"]).unwrap();
    int(&mut conn, &["MOVE", "x-missing", "2"]);
    assert_eq!(gauges(&mut conn), (3, 0, 3), "SWAPDB moves, keeps");
    cmd(&mut conn, &["SELECT", "1"]).unwrap();
    int(&mut conn, &["MOVE", "c2", "0"]);
    assert_eq!(gauges(&mut conn), (3, 0, 3));
    cmd(&mut conn, &["FLUSHDB"]).unwrap();
    // Valkey flushes in the background by default (lazyfree-lazy-user-flush):
    // the gauges follow once the values are freed.
    wait_until("FLUSHDB to free db 1's values (c2 is left in db 0)", || {
        gauges(&mut conn) == (1, 0, 1)
    });
    cmd(&mut conn, &["SELECT", "0"]).unwrap();
    acquire(&mut conn, "short", "me", 40).unwrap();
    assert_eq!(gauges(&mut conn), (2, 0, 2));
    wait_until("Redis to expire the short lease", || {
        gauges(&mut conn) == (1, 0, 1)
    });
    cmd(&mut conn, &["FLUSHALL", "SYNC"]).unwrap();
    assert_eq!(gauges(&mut conn), (0, 0, 0));
    for i in 0..50 {
        acquire(&mut conn, &format!("k{i}"), "me", 60_000).unwrap();
    }
    cmd(&mut conn, &["DLOCK.LATCH", "l", "3", "60000"]).unwrap();
    assert_eq!(gauges(&mut conn), (50, 1, 50));
    cmd(&mut conn, &["FLUSHALL", "ASYNC"]).unwrap();
    wait_until("the background flush to free the values", || {
        gauges(&mut conn) == (0, 0, 0)
    });
}

/// Stats live in memory only, as Redis's own: a restart keeps the data
/// (RDB) and the gauges that describe it, and starts every counter at 0.
#[test]
fn a_restart_keeps_gauges_of_the_loaded_data_and_zeroes_counters() {
    let mut server = Server::with_args(&["--save", "", "--appendonly", "no"]);
    let mut conn = server.connect();
    for key in ["a", "b"] {
        acquire(&mut conn, key, "me", 600_000).unwrap();
    }
    cmd(&mut conn, &["DLOCK.ACQUIRE", "s", "r1", "600000", "SHARED"]).unwrap();
    cmd(&mut conn, &["DLOCK.ACQUIRE", "s", "r2", "600000", "SHARED"]).unwrap();
    cmd(&mut conn, &["DLOCK.LATCH", "l", "3", "600000"]).unwrap();
    cmd(&mut conn, &["SAVE"]).unwrap();
    assert_eq!(gauges(&mut conn), (3, 1, 4));
    assert_eq!(field(&mut conn, "grants_immediate"), 4);
    server.restart();
    let mut conn = server.connect();
    assert_eq!(gauges(&mut conn), (3, 1, 4));
    let info = dlock_info(&mut conn);
    for name in COUNTERS.iter().filter(|name| !name.starts_with("grace_")) {
        assert_eq!(info.get(*name), Some(&0), "dlock_{name} after a restart");
    }
    // DEBUG RELOAD (where DEBUG is enabled) saves, empties the data set and
    // loads it again: the gauges are replaced, not added to.
    let _: redis::RedisResult<Value> = redis::cmd("DEBUG").arg("RELOAD").query(&mut conn);
    assert_eq!(gauges(&mut conn), (3, 1, 4), "a reload replaces, not adds");
}

/// A replica counts the values and holders it holds: after its full sync,
/// and as the replication stream changes them.
#[test]
fn a_replica_has_its_own_gauges() {
    let master = Server::start();
    let mut on_master = master.connect();
    acquire(&mut on_master, "before", "me", 600_000).unwrap();
    cmd(&mut on_master, &["DLOCK.LATCH", "l", "2", "600000"]).unwrap();
    let replica = replica_of(&master, &[]);
    let mut on_replica = replica.connect();
    wait_until("the full sync to load", || {
        gauges(&mut on_replica) == (1, 1, 1)
    });
    for owner in ["r1", "r2"] {
        cmd(
            &mut on_master,
            &["DLOCK.ACQUIRE", "s", owner, "600000", "SHARED"],
        )
        .unwrap();
    }
    acquire(&mut on_master, "after", "me", 600_000).unwrap();
    wait_for_replica(&mut on_master);
    assert_eq!(gauges(&mut on_replica), (3, 1, 4));
    assert_eq!(gauges(&mut on_master), (3, 1, 4));
    release(&mut on_master, "before", "me");
    int(&mut on_master, &["DLOCK.RELEASE", "s", "r1", "SHARED"]);
    cmd(&mut on_master, &["DLOCK.COUNTDOWN", "l", "2"]).unwrap();
    wait_for_replica(&mut on_master);
    assert_eq!(gauges(&mut on_replica), (2, 0, 2));
    cmd(&mut on_master, &["FLUSHALL"]).unwrap();
    wait_for_replica(&mut on_master);
    wait_until("the replica's flush to free its values", || {
        gauges(&mut on_replica) == (0, 0, 0)
    });
    // Counters are the master's: a replica grants nothing.
    assert_eq!(field(&mut on_replica, "grants_immediate"), 0);
}

/// `DLOCK.STATS` answers bad input as Redis's container commands do.
#[test]
fn dlock_stats_refuses_bad_input_as_redis_does() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(
        error_of(&mut conn, &["DLOCK.STATS"]),
        "ERR wrong number of arguments for 'dlock.stats' command"
    );
    assert_eq!(
        error_of(&mut conn, &["DLOCK.STATS", "FOO"]),
        "ERR unknown subcommand 'FOO'. Try DLOCK.STATS HELP."
    );
    assert_eq!(
        error_of(&mut conn, &["DLOCK.STATS", "RESET", "now"]),
        "ERR wrong number of arguments for 'dlock.stats|reset' command"
    );
    assert_eq!(
        cmd(&mut conn, &["dlock.stats", "reset"]).unwrap(),
        Value::Okay
    );
    match cmd(&mut conn, &["DLOCK.STATS", "HELP"]).unwrap() {
        Value::Array(lines) => assert!(lines.len() >= 3, "{lines:?}"),
        other => panic!("HELP: {other:?}"),
    }
    let info = match cmd(&mut conn, &["COMMAND", "INFO", "dlock.stats"]).unwrap() {
        Value::Array(mut commands) => commands.remove(0),
        other => panic!("COMMAND INFO: {other:?}"),
    };
    let Value::Array(parts) = info else {
        panic!("COMMAND INFO entry: {info:?}")
    };
    assert_eq!(parts[1], Value::Int(-2), "arity");
    assert_eq!(parts[3], Value::Int(0), "no first key");
}

/// Over `maxmemory` the commands that create state are refused with `OOM`
/// and each refusal is counted; giving back still works and counts nothing.
#[test]
fn oom_refusals_are_counted() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "held", "me", 60_000).unwrap();
    cmd(
        &mut conn,
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    )
    .unwrap();
    let memory: String = redis::cmd("INFO").arg("memory").query(&mut conn).unwrap();
    let used: u64 = memory
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("used_memory");
    cmd(
        &mut conn,
        &["CONFIG", "SET", "maxmemory", &(used / 2).to_string()],
    )
    .unwrap();
    for args in [
        &["DLOCK.ACQUIRE", "new", "someone", "60000"][..],
        &["DLOCK.FAIR", "new", "someone", "60000"],
        &["DLOCK.MACQUIRE", "1", "new", "someone", "60000"],
        &["DLOCK.LATCH", "new", "1", "60000"],
    ] {
        assert_eq!(
            error_of(&mut conn, args),
            "OOM command not allowed when used memory > 'maxmemory'.",
            "{args:?}"
        );
    }
    assert_eq!(release(&mut conn, "held", "me"), 0);
    assert_eq!(field(&mut conn, "oom_refusals"), 4);
    assert_eq!(gauges(&mut conn), (0, 0, 0));
    cmd(&mut conn, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    acquire(&mut conn, "new", "someone", 60_000).unwrap();
    assert_eq!(field(&mut conn, "oom_refusals"), 4);
}
