//! `DLOCK.INFO key FULL`: the plain fields, then `queue-detail` (kind, mode,
//! limit, time waited, time left, client id of every queue entry) and
//! `holders-detail` (holds, token, lease, SESSION client of every holder),
//! in RESP2 and RESP3.

use crate::common;

use std::time::Instant;

use common::*;

/// Field/value pairs of a RESP2 flat array or a RESP3 map.
fn pairs(value: &Value) -> Vec<(String, Value)> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| (text(&pair[0]), pair[1].clone()))
            .collect(),
        Value::Map(items) => items.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        other => panic!("not a field/value reply: {other:?}"),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

fn field(pairs: &[(String, Value)], name: &str) -> Value {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn list(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items.clone(),
        other => panic!("not an array: {other:?}"),
    }
}

/// The reply of `DLOCK.INFO key FULL` as pairs; None for null.
fn full(conn: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    match cmd(conn, &["DLOCK.INFO", key, "FULL"]).expect("DLOCK.INFO FULL") {
        Value::Nil => None,
        reply => Some(pairs(&reply)),
    }
}

const PLAIN: [&str; 8] = [
    "owner", "holds", "token", "pttl", "waiting", "queue", "shared", "holders",
];

/// One queue-detail entry: (owner, kind, mode, limit, waited, expires-in, client).
type QueueEntry = (String, String, String, Value, i64, i64, Value);

fn queue_detail(info: &[(String, Value)]) -> Vec<QueueEntry> {
    list(&field(info, "queue-detail"))
        .iter()
        .map(|entry| {
            let entry = pairs(entry);
            let names: Vec<&str> = entry.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                names,
                [
                    "owner",
                    "kind",
                    "mode",
                    "limit",
                    "weight",
                    "waited-ms",
                    "expires-in-ms",
                    "client-id"
                ]
            );
            // Nothing here asks for a WEIGHT (tests/weights.rs does).
            assert_eq!(int(&entry[4].1), 1, "the default weight");
            (
                text(&entry[0].1),
                text(&entry[1].1),
                text(&entry[2].1),
                entry[3].1.clone(),
                int(&entry[5].1),
                int(&entry[6].1),
                entry[7].1.clone(),
            )
        })
        .collect()
}

fn holders_detail(info: &[(String, Value)]) -> Vec<Vec<(String, Value)>> {
    list(&field(info, "holders-detail"))
        .iter()
        .map(|entry| {
            let entry = pairs(entry);
            let names: Vec<&str> = entry.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                names,
                [
                    "owner",
                    "holds",
                    "exclusive",
                    "shared",
                    "token",
                    "pttl",
                    "client-id"
                ]
            );
            entry
        })
        .collect()
}

#[test]
fn a_missing_key_is_null_and_the_plain_reply_is_unchanged() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(full(&mut conn, "none"), None);
    let mut conn3 = server.connect_resp3();
    assert_eq!(
        cmd(&mut conn3, &["DLOCK.INFO", "none", "full"]).expect("INFO"),
        Value::Nil
    );
    acquire(&mut conn, "k", "a", 30_000).expect("acquire");
    let plain = pairs(&cmd(&mut conn, &["DLOCK.INFO", "k"]).expect("INFO"));
    let names: Vec<&str> = plain.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, PLAIN);
    let info = full(&mut conn, "k").expect("FULL");
    let names: Vec<&str> = info.iter().map(|(k, _)| k.as_str()).collect();
    let mut expected = PLAIN.to_vec();
    expected.extend(["queue-detail", "holders-detail"]);
    assert_eq!(names, expected);
    // The two replies come a moment apart: remaining times may differ by
    // the millisecond that passed (the lock's and each holder's, the fifth
    // of the six elements of a `holders` entry, before the weight);
    // everything else is the same.
    let without_pttls = |name: &str, value: &Value| -> Value {
        match (name, value) {
            ("pttl", _) => Value::Nil,
            ("holders", Value::Array(holders)) => Value::Array(
                holders
                    .iter()
                    .map(|holder| match holder {
                        Value::Array(items) => {
                            assert_eq!(items.len(), 6, "{holder:?}");
                            let pttl = int(&items[4]);
                            assert!((1..=30_000).contains(&pttl), "{holder:?}");
                            assert_eq!(int(&items[5]), 1, "an exclusive hold weighs 1");
                            let mut items = items.clone();
                            items.remove(4);
                            Value::Array(items)
                        }
                        other => other.clone(),
                    })
                    .collect(),
            ),
            _ => value.clone(),
        }
    };
    for (name, value) in &plain {
        assert_eq!(
            without_pttls(name, &field(&info, name)),
            without_pttls(name, value),
            "{name}"
        );
    }
    assert!(error_of(&mut conn, &["DLOCK.INFO", "k", "FULLER"]).starts_with("ERR syntax error"));
    assert!(
        error_of(&mut conn, &["DLOCK.INFO", "k", "FULL", "FULL"]).starts_with("ERR syntax error")
    );
}

#[test]
fn blocked_waiters_and_reservations_show_kind_time_and_client() {
    let server = Server::start();
    let mut conn = server.connect();
    let started = Instant::now();
    let (token, _, _) = acquire(&mut conn, "job", "holder", 30_000).expect("acquire");
    assert_eq!(
        cmd(&mut conn, &["DLOCK.FAIR", "job", "r1", "30000"]).expect("FAIR"),
        Value::Nil
    );
    let w1 = block_acquire(&server, "job", "w1", 30_000, 60_000);
    wait_for_waiting(&mut conn, "job", 2);
    let w2 = spawn_command(
        &server,
        &[
            "DLOCK.ACQUIRE",
            "job",
            "w2",
            "30000",
            "SHARED",
            "LIMIT",
            "3",
            "BLOCK",
            "0",
        ],
    );
    wait_for_waiting(&mut conn, "job", 3);
    let info = full(&mut conn, "job").expect("FULL");
    let elapsed = started.elapsed().as_millis() as i64 + 5;
    let queue = queue_detail(&info);
    assert_eq!(queue.len(), 3, "{queue:?}");
    let (owner, kind, mode, limit, waited, expires, client) = &queue[0];
    assert_eq!(
        (owner.as_str(), kind.as_str(), mode.as_str()),
        ("r1", "reservation", "exclusive")
    );
    assert_eq!(*limit, Value::Nil);
    assert_eq!(*client, Value::Nil, "a reservation has no client");
    assert!((0..=elapsed).contains(waited), "{waited} > {elapsed}");
    assert!(
        (5_000 - elapsed..=5_000).contains(expires),
        "the reservation ends dlock.fair-reservation-ms after FAIR: {expires}"
    );
    let r1_waited = *waited;

    let (owner, kind, mode, limit, waited, expires, client) = &queue[1];
    assert_eq!(
        (owner.as_str(), kind.as_str(), mode.as_str()),
        ("w1", "blocked", "exclusive")
    );
    assert_eq!(*limit, Value::Nil);
    assert_eq!(*client, Value::Int(w1.id), "CLIENT ID of w1's connection");
    assert!(*waited <= r1_waited, "w1 joined after r1");
    assert!((60_000 - elapsed..=60_000).contains(expires), "{expires}");

    let (owner, kind, mode, limit, _, expires, client) = &queue[2];
    assert_eq!(
        (owner.as_str(), kind.as_str(), mode.as_str()),
        ("w2", "blocked", "shared")
    );
    assert_eq!(*limit, Value::Int(3));
    assert_eq!(*expires, -1, "BLOCK 0 never gives up");
    assert_eq!(*client, Value::Int(w2.id));

    let holders = holders_detail(&info);
    assert_eq!(holders.len(), 1);
    assert_eq!(text(&field(&holders[0], "owner")), "holder");
    assert_eq!(int(&field(&holders[0], "holds")), 1);
    assert_eq!(int(&field(&holders[0], "exclusive")), 1);
    assert_eq!(int(&field(&holders[0], "shared")), 0);
    assert_eq!(int(&field(&holders[0], "token")), token);
    let pttl = int(&field(&holders[0], "pttl"));
    assert!((30_000 - elapsed..=30_000).contains(&pttl), "{pttl}");
    assert_eq!(field(&holders[0], "client-id"), Value::Nil);

    // A refreshed reservation keeps its place and its waited time, and
    // gets a new deadline.
    wait_until("time to pass", || started.elapsed().as_millis() > 30);
    assert_eq!(
        cmd(&mut conn, &["DLOCK.FAIR", "job", "r1", "30000"]).expect("FAIR"),
        Value::Nil
    );
    let queue = queue_detail(&full(&mut conn, "job").expect("FULL"));
    assert_eq!(queue[0].0, "r1");
    assert!(queue[0].4 >= r1_waited, "the place keeps its first moment");
    assert!(queue[0].5 > 4_900, "a new deadline: {}", queue[0].5);

    // CLIENT KILL ID with the shown id ends the wait: the entry is gone.
    let killed = int(&cmd(&mut conn, &["CLIENT", "KILL", "ID", &w1.id.to_string()]).expect("KILL"));
    assert_eq!(killed, 1);
    wait_for_waiting(&mut conn, "job", 2);
    let owners: Vec<String> = queue_detail(&full(&mut conn, "job").expect("FULL"))
        .into_iter()
        .map(|entry| entry.0)
        .collect();
    assert_eq!(owners, ["r1", "w2"]);
    drop(w1);
    drop(w2);
}

#[test]
fn a_timed_out_waiter_leaves_the_detail() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "k", "a", 30_000).expect("acquire");
    let stays = block_acquire(&server, "k", "stays", 30_000, 0);
    wait_for_waiting(&mut conn, "k", 1);
    let leaves = block_acquire(&server, "k", "leaves", 30_000, 100);
    wait_for_waiting(&mut conn, "k", 2);
    let queue = queue_detail(&full(&mut conn, "k").expect("FULL"));
    assert_eq!(queue[1].0, "leaves");
    assert!((0..=100).contains(&queue[1].5), "{}", queue[1].5);
    leaves.refused();
    let queue = queue_detail(&full(&mut conn, "k").expect("FULL"));
    let owners: Vec<&str> = queue.iter().map(|entry| entry.0.as_str()).collect();
    assert_eq!(owners, ["stays"]);
    assert_eq!(queue[0].6, Value::Int(stays.id));
    drop(stays);
}

#[test]
fn a_session_holder_shows_its_connection_in_resp2_and_resp3() {
    let server = Server::start();
    let mut session = server.connect();
    let id = client_id_of(&mut session);
    cmd(
        &mut session,
        &["DLOCK.ACQUIRE", "s", "me", "30000", "SESSION"],
    )
    .expect("SESSION");
    let mut other = server.connect();
    cmd(&mut other, &["DLOCK.ACQUIRE", "s", "me", "30000"]).expect("re-entry");
    for mut conn in [server.connect(), server.connect_resp3()] {
        let reply = cmd(&mut conn, &["DLOCK.INFO", "s", "FULL"]).expect("FULL");
        let info = pairs(&reply);
        let holders = holders_detail(&info);
        assert_eq!(holders.len(), 1);
        assert_eq!(int(&field(&holders[0], "holds")), 2);
        assert_eq!(field(&holders[0], "client-id"), Value::Int(id));
        // RESP3: the reply and each entry are maps.
        if let Value::Map(_) = reply {
            let entry = &list(&field(&info, "holders-detail"))[0];
            assert!(matches!(entry, Value::Map(_)), "{entry:?}");
        }
    }
    // The connection closes: the hold ends, and so does the key.
    drop(session);
    wait_until("the SESSION hold to end", || {
        cmd(&mut other, &["EXISTS", "s"]).expect("EXISTS") == Value::Int(0)
    });
    assert_eq!(full(&mut other, "s"), None);
}

#[test]
fn a_reservation_restored_by_restore_has_an_unknown_wait() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "k", "a", 60_000).expect("acquire");
    cmd(&mut conn, &["DLOCK.FAIR", "k", "r", "60000"]).expect("FAIR");
    let dumped = cmd(&mut conn, &["DUMP", "k"]).expect("DUMP");
    let Value::BulkString(dumped) = dumped else {
        panic!("DUMP: {dumped:?}");
    };
    run(&mut conn, &[b"RESTORE", b"copy", b"0", &dumped]).expect("RESTORE");
    let queue = queue_detail(&full(&mut conn, "copy").expect("FULL"));
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0].0, "r");
    assert_eq!(queue[0].4, -1, "when r joined is not in the RDB encoding");
    assert!(queue[0].5 > 0);
}
