//! The count-down latch: DLOCK.LATCH, DLOCK.COUNTDOWN, DLOCK.AWAIT and
//! DLOCK.INFO on a latch, against real servers: creation and trySet, count
//! down, awaiters woken together, timeouts, every way a latch disappears,
//! MULTI and scripts, CLIENT KILL, RDB, AOF, replicas, metadata, events and
//! every error changing nothing.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

/// `DLOCK.INFO` of a latch as (count, pttl, waiting); None when missing.
fn latch_info(conn: &mut Connection, key: &str) -> Option<(i64, i64, i64)> {
    let fields = info(conn, key)?;
    let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["count", "pttl", "waiting"], "latch INFO fields");
    let number = |index: usize| match &fields[index].1 {
        Value::Int(value) => *value,
        other => panic!("{key}: field {index} is {other:?}"),
    };
    Some((number(0), number(1), number(2)))
}

fn latch_count(conn: &mut Connection, key: &str) -> i64 {
    latch_info(conn, key).map_or(0, |(count, _, _)| count)
}

fn await_waiting(conn: &mut Connection, key: &str, n: i64) {
    wait_until(&format!("{key} to have {n} awaiters"), || {
        latch_info(conn, key).map_or(0, |(_, _, waiting)| waiting) == n
    });
}

fn spawn_await(server: &Server, key: &str, timeout: u64) -> Pending {
    spawn_command(server, &["DLOCK.AWAIT", key, &timeout.to_string()])
}

/// The integer an awaiter was answered, or None for null.
fn answer(pending: Pending) -> Option<i64> {
    match pending.join().0.expect("DLOCK.AWAIT failed") {
        Value::Int(value) => Some(value),
        Value::Nil => None,
        other => panic!("not an AWAIT reply: {other:?}"),
    }
}

fn dlock_stat(conn: &mut Connection, name: &str) -> i64 {
    info_number(conn, "dlock", &format!("dlock_{name}"))
}

fn digest(conn: &mut Connection) -> String {
    let value: String = redis::cmd("DEBUG").arg("DIGEST").query(conn).unwrap();
    value
}

#[test]
fn latch_is_created_once_with_its_count_and_deadline() {
    let server = Server::start();
    let mut conn = server.connect();
    let before = now_ms();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "3", "60000"]), 1);
    let expire = pexpiretime(&mut conn, "job");
    assert!(
        expire >= before + 60_000 && expire <= now_ms() + 60_000,
        "the key ends with the latch: {expire}"
    );
    let kind: String = redis::cmd("TYPE").arg("job").query(&mut conn).unwrap();
    assert_eq!(kind, "dlocklatc");
    let (count, pttl, waiting) = latch_info(&mut conn, "job").unwrap();
    assert_eq!((count, waiting), (3, 0));
    assert!(pttl > 59_000 && pttl <= 60_000, "{pttl}");

    // trySetCount: an existing latch is left exactly as it was.
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "7", "1000"]), 0);
    assert_eq!(latch_count(&mut conn, "job"), 3);
    assert_eq!(pexpiretime(&mut conn, "job"), expire);

    // RESP3: a map in the same order.
    let mut resp3 = server.connect_resp3();
    match cmd(&mut resp3, &["DLOCK.INFO", "job"]).unwrap() {
        Value::Map(pairs) => {
            let names: Vec<String> = pairs
                .iter()
                .map(|(name, _)| match name {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    Value::SimpleString(text) => text.clone(),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(names, ["count", "pttl", "waiting"]);
            assert_eq!(pairs[0].1, Value::Int(3));
        }
        other => panic!("not a map: {other:?}"),
    }
    assert_eq!(
        int(
            &mut conn,
            &["DLOCK.LATCH", "max", "9007199254740991", "1000"]
        ),
        1
    );
    assert_eq!(latch_count(&mut conn, "max"), 9_007_199_254_740_991);
}

#[test]
fn countdown_lowers_the_count_by_n_and_not_below_zero() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "10", "60000"]), 1);
    let expire = pexpiretime(&mut conn, "job");
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job"]), 9);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job", "4"]), 5);
    assert_eq!(latch_count(&mut conn, "job"), 5);
    assert_eq!(pexpiretime(&mut conn, "job"), expire, "the deadline stays");
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job", "100"]), 0);
    assert_eq!(
        int(&mut conn, &["EXISTS", "job"]),
        0,
        "an opened latch is gone"
    );
    // A missing key: 0, and nothing is created.
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job"]), 0);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "never", "3"]), 0);
    assert_eq!(int(&mut conn, &["DBSIZE"]), 0);
    // The name can hold a new latch.
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "1", "60000"]), 1);
    assert_eq!(
        int(
            &mut conn,
            &["DLOCK.COUNTDOWN", "job", "9223372036854775807"]
        ),
        0
    );
    assert_eq!(int(&mut conn, &["DBSIZE"]), 0);
}

#[test]
fn count_down_to_zero_wakes_every_awaiter_at_once() {
    const AWAITERS: usize = 32;
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "start", "2", "60000"]), 1);
    let pending: Vec<Pending> = (0..AWAITERS)
        .map(|_| spawn_await(&server, "start", 0))
        .collect();
    await_waiting(&mut conn, "start", AWAITERS as i64);
    assert_eq!(dlock_stat(&mut conn, "latch_awaiters"), AWAITERS as i64);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "start"]), 1);
    assert!(
        pending.iter().all(|p| !p.is_finished()),
        "nobody is answered before the count reaches 0"
    );
    let sent = Instant::now();
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "start"]), 0);
    let mut latest = Duration::ZERO;
    for awaiter in pending {
        let (reply, at) = awaiter.join();
        assert_eq!(reply.unwrap(), Value::Int(1), "the latch opened");
        latest = latest.max(at.saturating_duration_since(sent));
    }
    println!("last of {AWAITERS} awaiters answered {latest:?} after the last COUNTDOWN");
    assert!(
        latest < Duration::from_millis(250),
        "every awaiter is answered in the step that opens the latch: {latest:?}"
    );
    assert_eq!(int(&mut conn, &["EXISTS", "start"]), 0);
    assert_eq!(dlock_stat(&mut conn, "latch_awaiters"), 0);
    assert_eq!(dlock_stat(&mut conn, "latches_opened"), 1);
}

#[test]
fn await_on_a_missing_key_replies_one_at_once() {
    let server = Server::start();
    let mut conn = server.connect();
    let started = Instant::now();
    assert_eq!(int(&mut conn, &["DLOCK.AWAIT", "nothing", "0"]), 1);
    assert_eq!(int(&mut conn, &["DLOCK.AWAIT", "nothing", "5000"]), 1);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(int(&mut conn, &["DBSIZE"]), 0, "AWAIT creates nothing");
}

#[test]
fn await_times_out_with_null_and_leaves_the_latch() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "2", "60000"]), 1);
    let expire = pexpiretime(&mut conn, "job");
    let waiter = spawn_await(&server, "job", 200);
    let sent = waiter.sent;
    let at = waiter.refused();
    let waited = at.duration_since(sent);
    assert!(waited >= Duration::from_millis(190), "{waited:?}");
    assert_eq!(
        latch_info(&mut conn, "job").map(|(c, _, w)| (c, w)),
        Some((2, 0))
    );
    assert_eq!(pexpiretime(&mut conn, "job"), expire);
    assert_eq!(dlock_stat(&mut conn, "await_timeouts"), 1);
    assert_eq!(dlock_stat(&mut conn, "latch_awaiters"), 0);
    // The latch still opens normally afterwards, for a new awaiter.
    let waiter = spawn_await(&server, "job", 10_000);
    await_waiting(&mut conn, "job", 1);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job", "2"]), 0);
    assert_eq!(answer(waiter), Some(1));
}

/// Blocks one awaiter on a fresh latch `key`, runs `vanish`, and checks the
/// awaiter is answered 0 within `within`.
fn vanishes_with_zero(
    server: &Server,
    conn: &mut Connection,
    key: &str,
    ttl_ms: u64,
    within: Duration,
    vanish: impl FnOnce(&mut Connection),
) {
    assert_eq!(
        int(conn, &["DLOCK.LATCH", key, "5", &ttl_ms.to_string()]),
        1
    );
    let waiter = spawn_await(server, key, 0);
    await_waiting(conn, key, 1);
    let started = Instant::now();
    vanish(conn);
    let (reply, at) = waiter.join();
    assert_eq!(reply.unwrap(), Value::Int(0), "{key}: gone without opening");
    let took = at.saturating_duration_since(started);
    assert!(took < within, "{key}: answered after {took:?}");
}

#[test]
fn deletion_flush_rename_and_overwrite_answer_zero() {
    let server = Server::start();
    let mut conn = server.connect();
    let quick = Duration::from_secs(2);
    vanishes_with_zero(&server, &mut conn, "del", 60_000, quick, |c| {
        assert_eq!(int(c, &["DEL", "del"]), 1);
    });
    vanishes_with_zero(&server, &mut conn, "unlink", 60_000, quick, |c| {
        assert_eq!(int(c, &["UNLINK", "unlink"]), 1);
    });
    vanishes_with_zero(&server, &mut conn, "set", 60_000, quick, |c| {
        cmd(c, &["SET", "set", "plain"]).unwrap();
    });
    vanishes_with_zero(&server, &mut conn, "rename", 60_000, quick, |c| {
        cmd(c, &["RENAME", "rename", "renamed"]).unwrap();
    });
    assert_eq!(
        latch_count(&mut conn, "renamed"),
        5,
        "the latch itself moved"
    );
    vanishes_with_zero(&server, &mut conn, "flushdb", 60_000, quick, |c| {
        cmd(c, &["FLUSHDB"]).unwrap();
    });
    vanishes_with_zero(&server, &mut conn, "flushall", 60_000, quick, |c| {
        cmd(c, &["FLUSHALL"]).unwrap();
    });
    vanishes_with_zero(&server, &mut conn, "async", 60_000, quick, |c| {
        cmd(c, &["FLUSHALL", "ASYNC"]).unwrap();
    });
    vanishes_with_zero(&server, &mut conn, "swapped", 60_000, quick, |c| {
        cmd(c, &["SWAPDB", "0", "1"]).unwrap();
    });
    assert_eq!(dlock_stat(&mut conn, "latch_awaiters"), 0);
}

#[test]
fn expiry_answers_zero_at_the_deadline_even_without_active_expiry() {
    // With Redis's own expiry cycle off, only the module's timer touches the
    // key at its deadline.
    let (server, mut conn) = server_without_active_expiry();
    let created = Instant::now();
    vanishes_with_zero(
        &server,
        &mut conn,
        "short",
        300,
        Duration::from_millis(1_500),
        |_| {},
    );
    assert!(created.elapsed() >= Duration::from_millis(290));
    assert_eq!(int(&mut conn, &["EXISTS", "short"]), 0);
    // Several awaiters of one latch, and a missing latch now means open.
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "many", "1", "300"]), 1);
    let waiters: Vec<Pending> = (0..4).map(|_| spawn_await(&server, "many", 0)).collect();
    for waiter in waiters {
        assert_eq!(answer(waiter), Some(0));
    }
    assert_eq!(int(&mut conn, &["DLOCK.AWAIT", "many", "0"]), 1);
}

#[test]
fn multi_scripts_and_functions_do_not_block() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "1", "60000"]), 1);
    let started = Instant::now();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.AWAIT")
        .arg("job")
        .arg(0)
        .cmd("DLOCK.AWAIT")
        .arg("missing")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(replies, vec![Value::Nil, Value::Int(1)]);
    let script = "return redis.call('DLOCK.AWAIT', KEYS[1], '0')";
    let closed = cmd(&mut conn, &["EVAL", script, "1", "job"]).unwrap();
    assert_eq!(closed, Value::Nil);
    let open = cmd(&mut conn, &["EVAL", script, "1", "missing"]).unwrap();
    assert_eq!(open, Value::Int(1));
    let library = "#!lua name=latchlib\n\
        redis.register_function('awaitlatch', function(keys, args) \
        return redis.call('DLOCK.AWAIT', keys[1], '0') end)";
    cmd(&mut conn, &["FUNCTION", "LOAD", library]).unwrap();
    assert_eq!(
        cmd(&mut conn, &["FCALL", "awaitlatch", "1", "job"]).unwrap(),
        Value::Nil
    );
    assert_eq!(
        cmd(&mut conn, &["FCALL", "awaitlatch", "1", "missing"]).unwrap(),
        Value::Int(1)
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        latch_info(&mut conn, "job").map(|(c, _, w)| (c, w)),
        Some((1, 0))
    );
    // COUNTDOWN works inside MULTI and scripts like anywhere else.
    let countdown = "return redis.call('DLOCK.COUNTDOWN', KEYS[1])";
    assert_eq!(
        cmd(&mut conn, &["EVAL", countdown, "1", "job"]).unwrap(),
        Value::Int(0)
    );
    assert_eq!(int(&mut conn, &["EXISTS", "job"]), 0);
}

#[test]
fn client_kill_of_an_awaiter_takes_it_out_of_the_latch() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "1", "60000"]), 1);
    let killed = spawn_await(&server, "job", 0);
    let kept = spawn_await(&server, "job", 0);
    await_waiting(&mut conn, "job", 2);
    let id = killed.id.to_string();
    assert_eq!(int(&mut conn, &["CLIENT", "KILL", "ID", &id]), 1);
    let (reply, _) = killed.join();
    assert!(reply.is_err(), "the killed awaiter's connection is gone");
    await_waiting(&mut conn, "job", 1);
    assert_eq!(dlock_stat(&mut conn, "latch_awaiters"), 1);
    // A raw client that disconnects while waiting leaves too.
    let stream = send_raw(&server, &["DLOCK.AWAIT", "job", "0"]);
    await_waiting(&mut conn, "job", 2);
    drop(stream);
    await_waiting(&mut conn, "job", 1);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job"]), 0);
    assert_eq!(answer(kept), Some(1));
    assert_eq!(dlock_stat(&mut conn, "latch_awaiters"), 0);
}

/// Latches in several states, with their counts.
fn latch_workload(conn: &mut Connection) -> Vec<(&'static str, i64)> {
    assert_eq!(int(conn, &["DLOCK.LATCH", "fresh", "3", "600000"]), 1);
    assert_eq!(int(conn, &["DLOCK.LATCH", "counted", "10", "700000"]), 1);
    assert_eq!(int(conn, &["DLOCK.COUNTDOWN", "counted", "4"]), 6);
    assert_eq!(int(conn, &["DLOCK.LATCH", "opened", "2", "600000"]), 1);
    assert_eq!(int(conn, &["DLOCK.COUNTDOWN", "opened", "2"]), 0);
    assert_eq!(
        int(conn, &["DLOCK.LATCH", "huge", "9007199254740991", "900000"]),
        1
    );
    vec![
        ("fresh", 3),
        ("counted", 6),
        ("huge", 9_007_199_254_740_991),
    ]
}

/// (key, count, absolute expire) of each latch.
fn latch_snapshot(conn: &mut Connection, keys: &[(&str, i64)]) -> Vec<(String, i64, i64)> {
    keys.iter()
        .map(|(key, _)| {
            (
                key.to_string(),
                latch_count(conn, key),
                pexpiretime(conn, key),
            )
        })
        .collect()
}

fn assert_latches(conn: &mut Connection, keys: &[(&str, i64)], before: &[(String, i64, i64)]) {
    assert_eq!(
        latch_snapshot(conn, keys),
        before,
        "count and deadline restored"
    );
    for (key, expected) in keys {
        assert_eq!(latch_count(conn, key), *expected, "{key}");
    }
    assert_eq!(
        int(conn, &["EXISTS", "opened"]),
        0,
        "an opened latch stays gone"
    );
}

#[test]
fn rdb_restores_each_latch_ending_at_the_same_instant() {
    let mut server = Server::with_args(&["--save", "", "--appendonly", "no"]);
    let mut conn = server.connect();
    let keys = latch_workload(&mut conn);
    let before = latch_snapshot(&mut conn, &keys);
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    server.restart();
    let mut conn = server.connect();
    assert_latches(&mut conn, &keys, &before);
    let kind: String = redis::cmd("TYPE").arg("fresh").query(&mut conn).unwrap();
    assert_eq!(kind, "dlocklatc");
    // DUMP/RESTORE use the same encoding.
    let dump: Vec<u8> = redis::cmd("DUMP").arg("counted").query(&mut conn).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(dump)
        .query(&mut conn)
        .unwrap();
    assert_eq!(latch_count(&mut conn, "restored"), 6);
}

#[test]
fn aof_replays_and_rewrites_each_latch_ending_at_the_same_instant() {
    for preamble in ["no", "yes"] {
        let mut server = Server::with_args(&aof_always_args(preamble));
        let mut conn = server.connect();
        let keys = latch_workload(&mut conn);
        let before = latch_snapshot(&mut conn, &keys);
        server.restart();
        let mut conn = server.connect();
        assert_latches(&mut conn, &keys, &before);
        // A rewrite writes each latch as its effect plus PEXPIREAT.
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
        wait_until("the AOF rewrite to finish", || {
            info_field(&mut conn, "persistence", "aof_rewrite_in_progress") == "0"
                && info_field(&mut conn, "persistence", "aof_rewrite_scheduled") == "0"
        });
        server.restart();
        let mut conn = server.connect();
        assert_latches(&mut conn, &keys, &before);
    }
}

#[test]
fn copy_digest_and_memory_usage() {
    let server = server_with_debug();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "4", "60000"]), 1);
    let waiter = spawn_await(&server, "job", 0);
    await_waiting(&mut conn, "job", 1);
    assert_eq!(int(&mut conn, &["COPY", "job", "copy"]), 1);
    assert_eq!(
        latch_info(&mut conn, "copy").map(|(c, _, w)| (c, w)),
        Some((4, 0))
    );
    assert_eq!(
        pexpiretime(&mut conn, "copy"),
        pexpiretime(&mut conn, "job")
    );
    let digest_of = |conn: &mut Connection, key: &str| -> Vec<String> {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(key)
            .query(conn)
            .unwrap()
    };
    assert_eq!(digest_of(&mut conn, "job"), digest_of(&mut conn, "copy"));
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "copy"]), 3);
    assert_ne!(digest_of(&mut conn, "job"), digest_of(&mut conn, "copy"));
    assert!(int(&mut conn, &["MEMORY", "USAGE", "job"]) > 0);
    // The copy opening does not answer the original's awaiter.
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "copy", "3"]), 0);
    assert!(!waiter.is_finished());
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job", "4"]), 0);
    assert_eq!(answer(waiter), Some(1));
}

#[test]
fn replica_follows_the_master_and_answers_its_own_awaiters() {
    let master = server_with_debug();
    let replica = replica_of(&master, &["--enable-debug-command", "yes"]);
    let mut conn = master.connect();
    let mut on_replica = replica.connect();
    let keys = latch_workload(&mut conn);
    wait_for_replica(&mut conn);
    let on_master = latch_snapshot(&mut conn, &keys);
    assert_eq!(latch_snapshot(&mut on_replica, &keys), on_master);
    assert_eq!(int(&mut on_replica, &["EXISTS", "opened"]), 0);
    let error = error_of(&mut on_replica, &["DLOCK.LATCH", "x", "1", "1000"]);
    assert!(error.starts_with("READONLY"), "{error}");

    // Awaiters on the replica hear of the master's opening (1) and of a
    // latch deleted closed (0).
    let opens = spawn_await(&replica, "fresh", 0);
    let deleted = spawn_await(&replica, "counted", 0);
    await_waiting(&mut on_replica, "fresh", 1);
    await_waiting(&mut on_replica, "counted", 1);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "fresh", "2"]), 1);
    wait_for_replica(&mut conn);
    assert_eq!(latch_count(&mut on_replica, "fresh"), 1);
    assert!(!opens.is_finished());
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "fresh"]), 0);
    assert_eq!(int(&mut conn, &["DEL", "counted"]), 1);
    assert_eq!(answer(opens), Some(1));
    assert_eq!(answer(deleted), Some(0));
    // An awaiter on the replica times out there (the module keeps AWAIT
    // timeouts, on replicas too), and leaves the latch.
    let patient = spawn_await(&replica, "huge", 100);
    let sent = patient.sent;
    let (reply, at) = patient.join();
    assert_eq!(reply.expect("AWAIT on the replica"), Value::Nil);
    assert!(at - sent >= Duration::from_millis(100), "{:?}", at - sent);
    assert_eq!(
        latch_info(&mut on_replica, "huge").map(|info| info.2),
        Some(0)
    );
    let digest_master = digest(&mut conn);
    wait_for_replica(&mut conn);
    assert_eq!(digest(&mut on_replica), digest_master);
}

#[test]
fn every_error_changes_nothing() {
    let server = server_with_debug();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "latch", "5", "60000"]), 1);
    acquire(&mut conn, "lock", "owner", 60_000).unwrap();
    cmd(&mut conn, &["SET", "string", "value"]).unwrap();
    let before = digest(&mut conn);
    let stats_before = (
        dlock_stat(&mut conn, "latches_created"),
        dlock_stat(&mut conn, "countdowns"),
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["DLOCK.LATCH", "new", "3"],
            "ERR wrong number of arguments",
        ),
        (&["DLOCK.LATCH", "new", "0", "1000"], "ERR invalid count"),
        (&["DLOCK.LATCH", "new", "-3", "1000"], "ERR invalid count"),
        (
            &["DLOCK.LATCH", "new", "9007199254740992", "1000"],
            "ERR invalid count",
        ),
        (&["DLOCK.LATCH", "new", "1.5", "1000"], "ERR invalid count"),
        (&["DLOCK.LATCH", "new", "3", "0"], "ERR invalid ttl"),
        (
            &["DLOCK.LATCH", "new", "3", "9007199254740992"],
            "ERR invalid ttl",
        ),
        (
            &["DLOCK.LATCH", "new", "3", "1000", "NX"],
            "ERR wrong number of arguments",
        ),
        (&["DLOCK.COUNTDOWN"], "ERR wrong number of arguments"),
        (&["DLOCK.COUNTDOWN", "latch", "0"], "ERR invalid n"),
        (&["DLOCK.COUNTDOWN", "latch", "-1"], "ERR invalid n"),
        (&["DLOCK.COUNTDOWN", "latch", "x"], "ERR invalid n"),
        (&["DLOCK.COUNTDOWN", "latch", "1", "1"], "ERR syntax error"),
        (&["DLOCK.AWAIT", "latch"], "ERR wrong number of arguments"),
        (&["DLOCK.AWAIT", "latch", "-1"], "ERR invalid timeout"),
        (&["DLOCK.AWAIT", "latch", "soon"], "ERR invalid timeout"),
        (
            &["DLOCK.AWAIT", "latch", "0", "0"],
            "ERR wrong number of arguments",
        ),
        (&["DLOCK.INFO", "latch", "extra"], "ERR syntax error"),
        // Latch commands on a lock or a string, lock commands on a latch.
        (&["DLOCK.LATCH", "lock", "1", "1000"], "WRONGTYPE"),
        (&["DLOCK.LATCH", "string", "1", "1000"], "WRONGTYPE"),
        (&["DLOCK.COUNTDOWN", "lock"], "WRONGTYPE"),
        (&["DLOCK.COUNTDOWN", "string", "2"], "WRONGTYPE"),
        (&["DLOCK.AWAIT", "lock", "0"], "WRONGTYPE"),
        (&["DLOCK.AWAIT", "string", "0"], "WRONGTYPE"),
        (&["DLOCK.INFO", "string"], "WRONGTYPE"),
        (&["DLOCK.ACQUIRE", "latch", "me", "1000"], "WRONGTYPE"),
        (
            &["DLOCK.ACQUIRE", "latch", "me", "1000", "BLOCK", "0"],
            "WRONGTYPE",
        ),
        (&["DLOCK.FAIR", "latch", "me", "1000"], "WRONGTYPE"),
        (&["DLOCK.RELEASE", "latch", "me"], "WRONGTYPE"),
        (&["DLOCK.RENEW", "latch", "me", "1000"], "WRONGTYPE"),
        (&["GET", "latch"], "WRONGTYPE"),
        // The effect command is refused from clients.
        (
            &["DLOCK.LATCHSTATE", "latch", "SET", "1", "1"],
            "ERR DLOCK.LATCHSTATE is internal",
        ),
        (
            &["DLOCK.LATCHSTATE", "latch", "OPEN"],
            "ERR DLOCK.LATCHSTATE is internal",
        ),
        (
            &["DLOCK.LATCHSTATE", "fresh", "SET", "1", "1"],
            "ERR DLOCK.LATCHSTATE is internal",
        ),
    ];
    for (args, prefix) in cases {
        let error = error_of(&mut conn, args);
        assert!(error.starts_with(prefix), "{args:?}: {error}");
    }
    assert_eq!(digest(&mut conn), before, "no error changed the dataset");
    assert_eq!(
        (
            dlock_stat(&mut conn, "latches_created"),
            dlock_stat(&mut conn, "countdowns"),
        ),
        stats_before
    );
    assert_eq!(
        latch_info(&mut conn, "latch").map(|(c, _, w)| (c, w)),
        Some((5, 0))
    );
}

#[test]
fn metadata_counters_and_keyspace_events() {
    let server = Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--notify-keyspace-events",
        "Kd",
    ]);
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let mut subscriber = client.get_connection().unwrap();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:job").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "2", "60000"]), 1);
    assert_eq!(
        cmd(&mut conn, &["DLOCK.AWAIT", "job", "30"]).unwrap(),
        Value::Nil
    );
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job"]), 1);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "job"]), 0);
    let mut events = Vec::new();
    while events.len() < 5 {
        let message = pubsub.get_message().expect("a keyspace event");
        events.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(
        events,
        [
            "dlock.latch",
            "dlock.timeout",
            "dlock.countdown",
            "dlock.countdown",
            "dlock.open"
        ]
    );
    for (name, value) in [
        ("latches_created", 1),
        ("countdowns", 2),
        ("latches_opened", 1),
        ("await_timeouts", 1),
        ("latch_awaiters", 0),
    ] {
        assert_eq!(dlock_stat(&mut conn, name), value, "{name}");
    }

    let text = |value: Value| format!("{value:?}");
    for (command, arity, flags, key_flag) in [
        ("dlock.latch", 4, "write", "RW"),
        ("dlock.countdown", -2, "write", "RW"),
        ("dlock.await", 3, "readonly", "RO"),
        ("dlock.latchstate", -3, "write", "RW"),
    ] {
        let info = text(cmd(&mut conn, &["COMMAND", "INFO", command]).unwrap());
        assert!(info.contains(&format!("int({arity})")), "{command}: {info}");
        assert!(
            info.contains(flags) && info.contains(key_flag),
            "{command}: {info}"
        );
        let docs = text(cmd(&mut conn, &["COMMAND", "DOCS", command]).unwrap());
        assert!(
            docs.contains("summary") && docs.contains("complexity"),
            "{docs}"
        );
    }
    let docs = text(cmd(&mut conn, &["COMMAND", "DOCS", "dlock.latch"]).unwrap());
    assert!(docs.contains("count") && docs.contains("ttl"), "{docs}");
    let keys = text(
        cmd(
            &mut conn,
            &["COMMAND", "GETKEYS", "DLOCK.AWAIT", "job", "5"],
        )
        .unwrap(),
    );
    assert!(keys.contains("job"), "{keys}");
    // A read-only user may await but not create or count down.
    cmd(
        &mut conn,
        &["ACL", "SETUSER", "reader", "on", ">pw", "%R~*", "+@all"],
    )
    .unwrap();
    let mut reader = server.connect();
    cmd(&mut reader, &["AUTH", "reader", "pw"]).unwrap();
    assert_eq!(int(&mut reader, &["DLOCK.AWAIT", "nothing", "0"]), 1);
    for command in [
        &["DLOCK.LATCH", "x", "1", "1000"][..],
        &["DLOCK.COUNTDOWN", "x"],
    ] {
        let error = error_of(&mut reader, command);
        assert!(error.starts_with("NOPERM"), "{command:?}: {error}");
    }
}

/// The count-down that opens a latch in the event-loop turn in which an
/// awaiter's timeout has already passed (the server sleeps through it, then
/// runs the COUNTDOWN pipelined behind the sleep) still answers that
/// awaiter 1. Redis 7.0 runs its own blocked-client timeouts before it
/// replies to clients unblocked in that turn and then sends nothing at all:
/// the module keeps AWAIT timeouts itself.
#[test]
fn an_opening_after_the_timeout_passed_unseen_is_delivered() {
    let server = Server::with_args(&["--enable-debug-command", "yes"]);
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "gate", "1", "60000"]), 1);
    let awaiter = spawn_await(&server, "gate", 200);
    await_waiting(&mut conn, "gate", 1);
    let mut pipe = redis::pipe();
    pipe.cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.4")
        .cmd("DLOCK.COUNTDOWN")
        .arg("gate");
    let _: Value = pipe.query(&mut conn).expect("DEBUG SLEEP + COUNTDOWN");
    wait_until("the awaiter to be answered", || awaiter.is_finished());
    assert_eq!(answer(awaiter), Some(1));
    assert_eq!(int(&mut conn, &["EXISTS", "gate"]), 0);
}
