//! Weighted permits (issue 27): `WEIGHT w` on ACQUIRE, FAIR and MACQUIRE.
//!
//! A shared request with `LIMIT n` fits when the weights of the distinct
//! shared owners, its own included, add up to at most `n`; the queue stays
//! strictly FIFO (a head too heavy to fit blocks lighter requests behind
//! it) and a batch grant stops at the first request that does not fit. One
//! owner has one weight per lock; the last shared release, an expiry or a
//! SESSION close frees all its permits at once. Weights travel through RDB
//! (encoding version 3; files of versions 1 and 2 still load), replication
//! and AOF rewrite. Every error changes nothing.

use crate::common;
use crate::sharedkit;

use common::*;
use sharedkit::*;

/// A lease longer than any test.
const LONG: u64 = 600_000;

/// `DLOCK.ACQUIRE key owner ttl SHARED LIMIT limit WEIGHT weight [extra...]`.
fn weighted_args(key: &str, owner: &str, limit: u64, weight: u64) -> Vec<String> {
    strings(&[
        "DLOCK.ACQUIRE",
        key,
        owner,
        &LONG.to_string(),
        "SHARED",
        "LIMIT",
        &limit.to_string(),
        "WEIGHT",
        &weight.to_string(),
    ])
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A weighted shared acquire as a grant (None: null); panics on an error.
fn take_weighted(
    conn: &mut Connection,
    key: &str,
    owner: &str,
    limit: u64,
    weight: u64,
) -> Option<Grant> {
    let args = weighted_args(key, owner, limit, weight);
    grant(cmd(conn, &as_strs(&args)).unwrap_or_else(|e| panic!("{args:?}: {e}")))
}

/// The same with `BLOCK 0`, on its own connection.
fn block_weighted(server: &Server, key: &str, owner: &str, limit: u64, weight: u64) -> Pending {
    let mut args = weighted_args(key, owner, limit, weight);
    args.extend(strings(&["BLOCK", "0"]));
    spawn_command(server, &as_strs(&args))
}

/// (owner, weight) of every holder, in the order the holds began.
fn weights(conn: &mut Connection, key: &str) -> Vec<(String, i64)> {
    holders(conn, key)
        .into_iter()
        .map(|h| (h.owner, h.weight))
        .collect()
}

/// The `weight` of every `queue-detail` entry of `DLOCK.INFO key FULL`.
fn queued_weights(conn: &mut Connection, key: &str) -> Vec<(String, i64)> {
    let fields = info_fields(cmd(conn, &["DLOCK.INFO", key, "FULL"]).expect("INFO FULL"))
        .unwrap_or_default();
    let Some((_, Value::Array(entries))) = fields.into_iter().find(|(n, _)| n == "queue-detail")
    else {
        return Vec::new();
    };
    entries
        .into_iter()
        .map(|entry| {
            let pairs = info_fields(entry).expect("a queue-detail entry");
            let get = |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
            };
            let owner = match get("owner") {
                Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                other => panic!("owner {other:?}"),
            };
            match get("weight") {
                Value::Int(weight) => (owner, weight),
                other => panic!("weight {other:?}"),
            }
        })
        .collect()
}

/// Everything INFO FULL says about `key` but the times that run down by
/// themselves (pttls, waited and remaining times).
fn still_picture(conn: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    fn strip(value: Value) -> Value {
        match value {
            Value::Array(items) => Value::Array(items.into_iter().map(strip).collect()),
            Value::Map(pairs) => Value::Map(
                pairs
                    .into_iter()
                    .filter(|(k, _)| !is_time(k))
                    .map(|(k, v)| (k, strip(v)))
                    .collect(),
            ),
            other => other,
        }
    }
    fn is_time(name: &Value) -> bool {
        matches!(name, Value::BulkString(n) if [&b"pttl"[..], b"waited-ms", b"expires-in-ms"].contains(&n.as_slice()))
    }
    let fields = info_fields(cmd(conn, &["DLOCK.INFO", key, "FULL"]).expect("INFO FULL"))?;
    Some(
        fields
            .into_iter()
            .filter(|(name, _)| name != "pttl")
            .map(|(name, value)| match (name.as_str(), value) {
                ("holders", Value::Array(holders)) => {
                    let holders = holders
                        .into_iter()
                        .map(|holder| match holder {
                            Value::Array(mut items) if items.len() == 6 => {
                                items.remove(4);
                                Value::Array(items)
                            }
                            other => panic!("not a six-element holders entry: {other:?}"),
                        })
                        .collect();
                    (name, Value::Array(holders))
                }
                ("queue-detail" | "holders-detail", Value::Array(entries)) => {
                    let entries = entries
                        .into_iter()
                        .map(|entry| {
                            let pairs = info_fields(entry).expect("an entry");
                            let kept: Vec<Value> = pairs
                                .into_iter()
                                .filter(|(n, _)| {
                                    !["pttl", "waited-ms", "expires-in-ms"].contains(&n.as_str())
                                })
                                .flat_map(|(n, v)| [Value::BulkString(n.into_bytes()), strip(v)])
                                .collect();
                            Value::Array(kept)
                        })
                        .collect();
                    (name, Value::Array(entries))
                }
                (_, value) => (name, strip(value)),
            })
            .collect(),
    )
}

#[test]
fn permits_are_counted_by_weight() {
    let server = Server::start();
    let mut conn = server.connect();
    let (a, holds, _) = take_weighted(&mut conn, "sem", "a", 5, 2).expect("2 of 5");
    assert_eq!(holds, 1);
    take_weighted(&mut conn, "sem", "b", 5, 3).expect("2 + 3 = 5");
    assert_eq!(
        take_weighted(&mut conn, "sem", "c", 5, 1),
        None,
        "2 + 3 + 1 > 5"
    );
    assert_eq!(
        weights(&mut conn, "sem"),
        vec![("a".into(), 2), ("b".into(), 3)]
    );
    assert_eq!(
        info_int(&mut conn, "sem", "shared"),
        2,
        "shared counts owners"
    );
    // An unweighted permit weighs 1; an exclusive request waits for all.
    assert_eq!(permit(&mut conn, "sem", "d", LONG, 5), None);
    assert_eq!(exclusive(&mut conn, "sem", "x", LONG), None);
    assert_eq!(release_shared(&mut conn, "sem", "a"), 0);
    take_weighted(&mut conn, "sem", "c", 5, 1).expect("3 + 1 <= 5");
    let (_, _, _) = permit(&mut conn, "sem", "d", LONG, 5).expect("3 + 1 + 1 = 5");
    assert_eq!(
        weights(&mut conn, "sem"),
        vec![("b".into(), 3), ("c".into(), 1), ("d".into(), 1)]
    );
    // Each request judges by its own LIMIT: with LIMIT 6 one more fits.
    assert_eq!(take_weighted(&mut conn, "sem", "e", 5, 1), None);
    take_weighted(&mut conn, "sem", "e", 6, 1).expect("5 + 1 <= 6");
    // The weight of a whole LIMIT takes the lock alone.
    let (full, _, _) = take_weighted(&mut conn, "whole", "f", 4, 4).expect("4 of 4");
    assert!(full > a);
    assert_eq!(take_weighted(&mut conn, "whole", "g", 4, 1), None);
    // A LIMIT binds only the request that names it: a reader without one
    // is not counted against.
    assert!(shared(&mut conn, "whole", "h", LONG).is_some());
}

#[test]
fn a_heavy_head_blocks_lighter_requests_behind_it() {
    let server = Server::start();
    let mut conn = server.connect();
    take_weighted(&mut conn, "sem", "a", 4, 3).expect("3 of 4");
    let heavy = block_weighted(&server, "sem", "b", 4, 2);
    wait_for_waiting(&mut conn, "sem", 1);
    // 3 + 1 would fit, but the head does not: no barging.
    assert_eq!(take_weighted(&mut conn, "sem", "c", 4, 1), None);
    assert_eq!(permit(&mut conn, "sem", "c", LONG, 4), None);
    let light = block_weighted(&server, "sem", "c", 4, 1);
    wait_for_waiting(&mut conn, "sem", 2);
    assert_eq!(
        queued_weights(&mut conn, "sem"),
        vec![("b".into(), 2), ("c".into(), 1)]
    );
    assert!(
        !light.is_finished(),
        "the light request waits behind the heavy head"
    );
    // The holder re-enters past the queue with its own weight.
    let (_, holds, _) = take_weighted(&mut conn, "sem", "a", 4, 3).expect("a re-entry");
    assert_eq!(holds, 2);
    assert_eq!(release_shared(&mut conn, "sem", "a"), 1);
    assert_eq!(waiting(&mut conn, "sem"), 2, "a still takes all 3 permits");
    // The last shared release frees all 3 permits; both fit (2 + 1) and
    // are granted in the same step.
    assert_eq!(release_shared(&mut conn, "sem", "a"), 0);
    let ((b, _, _), _) = heavy.granted();
    let ((c, _, _), _) = light.granted();
    assert!(b < c, "granted in queue order");
    assert_eq!(
        weights(&mut conn, "sem"),
        vec![("b".into(), 2), ("c".into(), 1)]
    );
    assert_eq!(waiting(&mut conn, "sem"), 0);
}

#[test]
fn a_batch_grant_stops_at_the_first_request_that_does_not_fit() {
    let server = Server::start();
    let mut conn = server.connect();
    take_weighted(&mut conn, "sem", "a", 4, 4).expect("all 4");
    let mut pending = Vec::new();
    for (n, (owner, weight)) in [("b", 1), ("c", 2), ("d", 2), ("e", 1)].iter().enumerate() {
        pending.push(block_weighted(&server, "sem", owner, 4, *weight));
        wait_for_waiting(&mut conn, "sem", n as i64 + 1);
    }
    let mut pending = pending.into_iter();
    let (b, c, d, e) = (
        pending.next().unwrap(),
        pending.next().unwrap(),
        pending.next().unwrap(),
        pending.next().unwrap(),
    );
    assert_eq!(release_shared(&mut conn, "sem", "a"), 0);
    b.granted();
    c.granted();
    // 1 + 2 + 2 > 4: d stops the batch, and e (which would fit) waits
    // behind it.
    assert_eq!(
        weights(&mut conn, "sem"),
        vec![("b".into(), 1), ("c".into(), 2)]
    );
    assert_eq!(queue(&mut conn, "sem"), strings(&["d", "e"]));
    assert!(!d.is_finished() && !e.is_finished());
    assert_eq!(release_shared(&mut conn, "sem", "b"), 0);
    d.granted();
    assert_eq!(
        queue(&mut conn, "sem"),
        strings(&["e"]),
        "2 + 2 = 4: e waits"
    );
    assert_eq!(release_shared(&mut conn, "sem", "c"), 0);
    e.granted();
    assert_eq!(
        weights(&mut conn, "sem"),
        vec![("d".into(), 2), ("e".into(), 1)]
    );
}

#[test]
fn one_owner_has_one_weight_per_lock_and_errors_change_nothing() {
    let server = server_with_debug();
    let mut conn = server.connect();
    let (token, _, _) = take_weighted(&mut conn, "sem", "a", 4, 2).expect("2 of 4");
    let (again, holds, _) = take_weighted(&mut conn, "sem", "a", 4, 2).expect("re-entry");
    assert_eq!(
        (again, holds),
        (token, 2),
        "same weight: one more hold, same token"
    );
    let blocked = block_weighted(&server, "sem", "q", 4, 3);
    wait_for_waiting(&mut conn, "sem", 1);
    let before = still_picture(&mut conn, "sem");
    let digest_before = digest(&mut conn, "sem");
    let long = LONG.to_string();
    let refused: Vec<Vec<&str>> = vec![
        // The holder with another weight, weighted or not.
        vec![
            "DLOCK.ACQUIRE",
            "sem",
            "a",
            &long,
            "SHARED",
            "LIMIT",
            "4",
            "WEIGHT",
            "1",
        ],
        vec!["DLOCK.ACQUIRE", "sem", "a", &long, "SHARED", "LIMIT", "4"],
        vec!["DLOCK.ACQUIRE", "sem", "a", &long, "SHARED"],
        vec![
            "DLOCK.FAIR",
            "sem",
            "a",
            &long,
            "SHARED",
            "LIMIT",
            "4",
            "WEIGHT",
            "3",
        ],
        vec![
            "DLOCK.ACQUIRE",
            "sem",
            "a",
            &long,
            "SHARED",
            "LIMIT",
            "4",
            "WEIGHT",
            "3",
            "BLOCK",
            "10",
        ],
        vec![
            "DLOCK.MACQUIRE",
            "2",
            "other",
            "sem",
            "a",
            &long,
            "SHARED",
            "LIMIT",
            "4",
            "WEIGHT",
            "3",
        ],
        // A waiting owner with another weight (its other connection).
        vec![
            "DLOCK.ACQUIRE",
            "sem",
            "q",
            &long,
            "SHARED",
            "LIMIT",
            "4",
            "WEIGHT",
            "1",
        ],
        vec![
            "DLOCK.FAIR",
            "sem",
            "q",
            &long,
            "SHARED",
            "LIMIT",
            "4",
            "WEIGHT",
            "2",
        ],
    ];
    for args in &refused {
        let error = error_of(&mut conn, args);
        assert!(error.starts_with("ERR invalid weight"), "{args:?}: {error}");
        assert!(error.contains("weight"), "{error}");
    }
    // Out of range or without SHARED and LIMIT, on every command.
    let bad: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "DLOCK.ACQUIRE",
                "sem",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "4",
                "WEIGHT",
                "5",
            ],
            "ERR invalid weight",
        ),
        (
            vec![
                "DLOCK.ACQUIRE",
                "sem",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "4",
                "WEIGHT",
                "0",
            ],
            "ERR invalid weight",
        ),
        (
            vec![
                "DLOCK.ACQUIRE",
                "sem",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "4",
                "WEIGHT",
                "-2",
            ],
            "ERR invalid weight",
        ),
        (
            vec![
                "DLOCK.ACQUIRE",
                "sem",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "4",
                "WEIGHT",
                "x",
            ],
            "ERR invalid weight",
        ),
        (
            vec!["DLOCK.ACQUIRE", "sem", "n", &long, "WEIGHT", "1"],
            "ERR syntax error: WEIGHT",
        ),
        (
            vec!["DLOCK.ACQUIRE", "sem", "n", &long, "SHARED", "WEIGHT", "1"],
            "ERR syntax error: WEIGHT",
        ),
        (
            vec![
                "DLOCK.FAIR",
                "sem",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "2",
                "WEIGHT",
                "3",
            ],
            "ERR invalid weight",
        ),
        (
            vec!["DLOCK.FAIR", "sem", "n", &long, "WEIGHT", "2", "BLOCK", "5"],
            "ERR syntax error: WEIGHT",
        ),
        (
            vec![
                "DLOCK.MACQUIRE",
                "2",
                "sem",
                "fresh",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "3",
                "WEIGHT",
                "4",
            ],
            "ERR invalid weight",
        ),
        (
            vec![
                "DLOCK.MACQUIRE",
                "1",
                "fresh",
                "n",
                &long,
                "LIMIT",
                "3",
                "WEIGHT",
                "1",
            ],
            "ERR syntax error: WEIGHT",
        ),
        (
            vec![
                "DLOCK.ACQUIRE",
                "sem",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "4",
                "WEIGHT",
            ],
            "ERR syntax error",
        ),
        (
            vec![
                "DLOCK.ACQUIRE",
                "sem",
                "n",
                &long,
                "SHARED",
                "LIMIT",
                "4",
                "WEIGHT",
                "1",
                "WEIGHT",
                "1",
            ],
            "ERR syntax error",
        ),
    ];
    for (args, prefix) in &bad {
        let error = error_of(&mut conn, args);
        assert!(error.starts_with(prefix), "{args:?}: {error}");
        assert!(
            error.to_lowercase().contains("weight") || *prefix == "ERR syntax error",
            "{error}"
        );
    }
    assert_eq!(still_picture(&mut conn, "sem"), before, "nothing changed");
    assert_eq!(digest(&mut conn, "sem"), digest_before);
    assert_eq!(
        int(&mut conn, &["EXISTS", "fresh", "other"]),
        0,
        "no key made"
    );
    assert!(!blocked.is_finished());
    // Once a's shared holds end, a new weight is a new hold.
    assert_eq!(release_shared(&mut conn, "sem", "a"), 1);
    assert_eq!(release_shared(&mut conn, "sem", "a"), 0);
    blocked.granted();
    let (fresh, _, _) = take_weighted(&mut conn, "sem", "a", 4, 1).expect("1 + 3 = 4");
    assert!(fresh > token);
    assert_eq!(
        weights(&mut conn, "sem"),
        vec![("q".into(), 3), ("a".into(), 1)]
    );
}

#[test]
fn an_exclusive_hold_weighs_one_and_a_downgrade_takes_its_weight() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = exclusive(&mut conn, "k", "w", LONG).expect("exclusive");
    assert_eq!(weights(&mut conn, "k"), vec![("w".into(), 1)]);
    let (same, _, _) = take_weighted(&mut conn, "k", "w", 3, 2).expect("shared re-entry");
    assert_eq!(same, token);
    assert_eq!(holders(&mut conn, "k")[0].fixed(), entry("w", 1, 1, token));
    assert_eq!(weights(&mut conn, "k"), vec![("w".into(), 2)]);
    assert_eq!(take_weighted(&mut conn, "k", "r", 3, 1), None, "excluded");
    assert_eq!(release(&mut conn, "k", "w"), 1, "the downgrade");
    take_weighted(&mut conn, "k", "r", 3, 1).expect("2 + 1 = 3");
    assert_eq!(
        take_weighted(&mut conn, "k", "s", 3, 1),
        None,
        "2 + 1 + 1 > 3"
    );
}

#[test]
fn expiry_and_session_close_free_all_permits() {
    let server = Server::start();
    let mut conn = server.connect();
    // Expiry: a lease of 300 ms on all 3 permits.
    let args = strings(&[
        "DLOCK.ACQUIRE",
        "exp",
        "a",
        "300",
        "SHARED",
        "LIMIT",
        "3",
        "WEIGHT",
        "3",
    ]);
    grant(cmd(&mut conn, &as_strs(&args)).unwrap()).expect("3 of 3");
    let waiter = block_weighted(&server, "exp", "b", 3, 2);
    let ((_, holds, _), _) = waiter.granted();
    assert_eq!(holds, 1);
    assert_eq!(weights(&mut conn, "exp"), vec![("b".into(), 2)]);

    // SESSION: the holder's connection closes.
    let mut holder = server.connect();
    let mut args = weighted_args("ses", "h", 4, 3);
    args.push("SESSION".into());
    grant(cmd(&mut holder, &as_strs(&args)).unwrap()).expect("3 of 4, tied to the connection");
    take_weighted(&mut conn, "ses", "x", 4, 1).expect("3 + 1 = 4");
    let first = block_weighted(&server, "ses", "y", 4, 2);
    wait_for_waiting(&mut conn, "ses", 1);
    let second = block_weighted(&server, "ses", "z", 4, 1);
    wait_for_waiting(&mut conn, "ses", 2);
    assert!(!first.is_finished() && !second.is_finished());
    // Closing the connection frees all 3 permits: both waiters fit.
    drop(holder);
    first.granted();
    second.granted();
    assert_eq!(
        weights(&mut conn, "ses"),
        vec![("x".into(), 1), ("y".into(), 2), ("z".into(), 1)]
    );
}

#[test]
fn macquire_takes_its_weight_on_every_key() {
    let server = Server::start();
    let mut conn = server.connect();
    take_weighted(&mut conn, "k1", "a", 3, 2).expect("2 of 3");
    let long = LONG.to_string();
    let request = |extra: &[&str]| {
        let mut args = vec![
            "DLOCK.MACQUIRE",
            "2",
            "k1",
            "k2",
            "m",
            long.as_str(),
            "SHARED",
            "LIMIT",
            "3",
            "WEIGHT",
            "2",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(String::from).collect::<Vec<String>>()
    };
    let at_once = request(&[]);
    assert_eq!(
        cmd(&mut conn, &as_strs(&at_once)).unwrap(),
        Value::Nil,
        "2 + 2 > 3 on k1"
    );
    assert_eq!(int(&mut conn, &["EXISTS", "k2"]), 0, "nothing taken on k2");
    let blocked = spawn_command(&server, &as_strs(&request(&["BLOCK", "0"])));
    wait_for_waiting(&mut conn, "k1", 1);
    wait_for_waiting(&mut conn, "k2", 1);
    assert_eq!(queued_weights(&mut conn, "k2"), vec![("m".into(), 2)]);
    assert_eq!(
        take_weighted(&mut conn, "k2", "late", 3, 1),
        None,
        "no barging on k2"
    );
    assert_eq!(release_shared(&mut conn, "k1", "a"), 0);
    let (reply, _) = blocked.join();
    let Value::Array(grants) = reply.expect("MACQUIRE") else {
        panic!("not an array of grants");
    };
    assert_eq!(grants.len(), 2);
    assert_eq!(weights(&mut conn, "k1"), vec![("m".into(), 2)]);
    assert_eq!(weights(&mut conn, "k2"), vec![("m".into(), 2)]);
    take_weighted(&mut conn, "k2", "late", 3, 1).expect("2 + 1 = 3");
    assert_eq!(take_weighted(&mut conn, "k1", "more", 3, 2), None);
}

/// Fixture facts: see tests/shared_durability.rs for the version-1 file.
const V1_RDB: &[u8] = include_bytes!("fixtures/v1-exclusive.rdb");
const V1_ALICE: i64 = 1795461796634870;

/// An RDB of encoding version 2 (shared holds, before weights), with `SAVE`
/// on redis-server 7.0.15, leases and `dlock.fair-reservation-ms` of ten
/// years:
///
/// * `v2:sem`: `alice` holds 1 shared, `bob` 2 shared (both LIMIT 2), then
///   reservations of `carol` (SHARED LIMIT 2) and `dan` (exclusive);
/// * `v2:excl`: `erin` holds exclusively;
/// * `v2:string`: the string `hello`.
const V2_RDB: &[u8] = include_bytes!("fixtures/v2-shared.rdb");
const V2_ALICE: i64 = 1795681032093176;
const V2_BOB: i64 = 1795681032096910;
const V2_ERIN: i64 = 1795681032120560;

/// An RDB of encoding version 3 (weights), written the same way:
///
/// * `v3:sem`: `alice` holds 2 shared of weight 2, `bob` 1 of weight 3 (both
///   LIMIT 5), then reservations of `carol` (SHARED LIMIT 5 WEIGHT 4) and
///   `dan` (exclusive);
/// * `v3:mixed`: `erin` holds exclusively and shared with weight 2;
/// * `v3:string`: the string `hello`.
const V3_RDB: &[u8] = include_bytes!("fixtures/v3-weighted.rdb");
const V3_ALICE: i64 = 1795683376330723;
const V3_BOB: i64 = 1795683376351462;
const V3_ERIN: i64 = 1795683376368774;

/// Saves `keys` in the current RDB version, restarts, and checks each loads
/// back as it was (its state and its DEBUG DIGEST-VALUE).
fn saved_and_loaded_alike(server: &mut Server, conn: &mut Connection, keys: &[&str]) {
    let picture = |conn: &mut Connection| -> Vec<_> {
        keys.iter()
            .map(|k| (still_picture(conn, k), digest(conn, k)))
            .collect()
    };
    let before = picture(conn);
    let _: () = redis::cmd("SAVE").query(conn).unwrap();
    server.restart();
    *conn = server.connect();
    assert_eq!(before, picture(conn));
}

fn loaded(file: &[u8]) -> Server {
    Server::with_files(
        &[("dump.rdb", file)],
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    )
}

/// (owner, exclusive, shared, token, weight) of every holder.
fn full_holders(conn: &mut Connection, key: &str) -> Vec<(String, i64, i64, i64, i64)> {
    holders(conn, key)
        .into_iter()
        .map(|h| (h.owner, h.exclusive, h.shared, h.token, h.weight))
        .collect()
}

#[test]
fn rdb_files_of_versions_1_2_and_3_load() {
    let server = loaded(V1_RDB);
    let mut conn = server.connect();
    assert_eq!(
        full_holders(&mut conn, "v1:held"),
        vec![("alice".into(), 2, 0, V1_ALICE, 1)]
    );
    assert_eq!(
        queued_weights(&mut conn, "v1:held"),
        vec![("bob".into(), 1), ("carol".into(), 1)]
    );
    drop(server);

    let mut server = loaded(V2_RDB);
    let mut conn = server.connect();
    assert_eq!(
        full_holders(&mut conn, "v2:sem"),
        vec![
            ("alice".into(), 0, 1, V2_ALICE, 1),
            ("bob".into(), 0, 2, V2_BOB, 1)
        ]
    );
    assert_eq!(
        queued_weights(&mut conn, "v2:sem"),
        vec![("carol".into(), 1), ("dan".into(), 1)]
    );
    assert_eq!(
        full_holders(&mut conn, "v2:excl"),
        vec![("erin".into(), 1, 0, V2_ERIN, 1)]
    );
    // The loaded semaphore works by weight: carol's reservation heads it.
    assert_eq!(take_weighted(&mut conn, "v2:sem", "zed", 3, 1), None);
    // Saved again in version 3, and loaded back the same.
    saved_and_loaded_alike(&mut server, &mut conn, &["v2:sem", "v2:excl"]);
    drop(server);

    let mut server = loaded(V3_RDB);
    let mut conn = server.connect();
    assert_eq!(
        full_holders(&mut conn, "v3:sem"),
        vec![
            ("alice".into(), 0, 2, V3_ALICE, 2),
            ("bob".into(), 0, 1, V3_BOB, 3)
        ]
    );
    assert_eq!(
        queued_weights(&mut conn, "v3:sem"),
        vec![("carol".into(), 4), ("dan".into(), 1)]
    );
    assert_eq!(
        full_holders(&mut conn, "v3:mixed"),
        vec![("erin".into(), 1, 1, V3_ERIN, 2)]
    );
    let text: String = redis::cmd("GET").arg("v3:string").query(&mut conn).unwrap();
    assert_eq!(text, "hello");
    // The weights bind after loading: 2 + 3 = 5, nobody fits; alice keeps
    // her weight; carol's reservation of 4 fits once bob is gone.
    let error = error_of(&mut conn, &as_strs(&weighted_args("v3:sem", "alice", 5, 1)));
    assert!(error.starts_with("ERR invalid weight"), "{error}");
    assert_eq!(release_shared(&mut conn, "v3:sem", "bob"), 0);
    assert_eq!(
        take_weighted(&mut conn, "v3:sem", "zed", 5, 1),
        None,
        "carol's place"
    );
    let fair = strings(&[
        "DLOCK.FAIR",
        "v3:sem",
        "carol",
        &LONG.to_string(),
        "SHARED",
        "LIMIT",
        "5",
        "WEIGHT",
        "4",
    ]);
    assert_eq!(
        cmd(&mut conn, &as_strs(&fair)).unwrap(),
        Value::Nil,
        "2 + 4 > 5"
    );
    saved_and_loaded_alike(&mut server, &mut conn, &["v3:sem", "v3:mixed"]);
}

/// Holders of several weights, re-entries, a downgrade, weighted
/// reservations and blocked waiters handed on by releases.
fn weighted_workload(server: &Server, conn: &mut Connection) {
    config_set(conn, "dlock.fair-reservation-ms", &LONG.to_string());
    take_weighted(conn, "s1", "a", 6, 2).expect("a");
    take_weighted(conn, "s1", "a", 6, 2).expect("a again");
    take_weighted(conn, "s1", "b", 6, 3).expect("b");
    let waiter = block_weighted(server, "s1", "c", 6, 4);
    wait_for_waiting(conn, "s1", 1);
    let fair = strings(&[
        "DLOCK.FAIR",
        "s1",
        "d",
        &LONG.to_string(),
        "SHARED",
        "LIMIT",
        "6",
        "WEIGHT",
        "2",
    ]);
    assert_eq!(cmd(conn, &as_strs(&fair)).unwrap(), Value::Nil);
    assert_eq!(release_shared(conn, "s1", "b"), 0);
    waiter.granted();
    assert_eq!(
        queue(conn, "s1"),
        strings(&["d"]),
        "2 + 4 = 6: c in, d keeps its place"
    );
    exclusive(conn, "s2", "w", LONG).expect("w");
    take_weighted(conn, "s2", "w", 5, 3).expect("w shared");
    assert_eq!(release(conn, "s2", "w"), 1);
    take_weighted(conn, "s2", "r", 5, 2).expect("r");
    let fair = strings(&[
        "DLOCK.FAIR",
        "s3",
        "e",
        &LONG.to_string(),
        "SHARED",
        "LIMIT",
        "7",
        "WEIGHT",
        "7",
    ]);
    grant(cmd(conn, &as_strs(&fair)).unwrap()).expect("e takes all of s3");
    let fair = strings(&[
        "DLOCK.FAIR",
        "s3",
        "f",
        &LONG.to_string(),
        "SHARED",
        "LIMIT",
        "7",
        "WEIGHT",
        "3",
    ]);
    assert_eq!(
        cmd(conn, &as_strs(&fair)).unwrap(),
        Value::Nil,
        "f keeps a place of weight 3"
    );
}

const WORKLOAD_KEYS: [&str; 3] = ["s1", "s2", "s3"];

#[test]
fn the_replica_equals_the_master() {
    let master = server_with_debug();
    let replica = replica_of(&master, &["--enable-debug-command", "yes"]);
    let mut on_master = master.connect();
    let mut on_replica = replica.connect();
    weighted_workload(&master, &mut on_master);
    wait_for_replica(&mut on_master);
    for key in WORKLOAD_KEYS {
        assert_eq!(
            full_holders(&mut on_replica, key),
            full_holders(&mut on_master, key),
            "{key}: holders with their weights"
        );
        assert_eq!(
            digest(&mut on_replica, key),
            digest(&mut on_master, key),
            "{key}"
        );
    }
    // Reservations carry their weight (blocked waiters are connection state
    // and stay on the master).
    assert_eq!(queued_weights(&mut on_replica, "s3"), vec![("f".into(), 3)]);
    assert_eq!(
        weights(&mut on_replica, "s2"),
        vec![("w".into(), 3), ("r".into(), 2)]
    );
    assert_eq!(
        weights(&mut on_replica, "s1"),
        vec![("a".into(), 2), ("c".into(), 4)]
    );
    // Hand-offs by release reach the replica too.
    assert_eq!(release_shared(&mut on_master, "s3", "e"), 0);
    grant(
        cmd(
            &mut on_master,
            &[
                "DLOCK.FAIR",
                "s3",
                "f",
                &LONG.to_string(),
                "SHARED",
                "LIMIT",
                "7",
                "WEIGHT",
                "3",
            ],
        )
        .unwrap(),
    )
    .expect("f claims its place");
    wait_for_replica(&mut on_master);
    assert_eq!(
        full_holders(&mut on_replica, "s3"),
        full_holders(&mut on_master, "s3")
    );
    assert_eq!(weights(&mut on_replica, "s3"), vec![("f".into(), 3)]);
}

#[test]
fn aof_rewrite_and_replay_keep_the_weights() {
    for preamble in ["yes", "no"] {
        let mut server = Server::with_args(&[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            preamble,
            "--enable-debug-command",
            "yes",
        ]);
        let mut conn = server.connect();
        weighted_workload(&server, &mut conn);
        let before: Vec<_> = WORKLOAD_KEYS
            .iter()
            .map(|k| {
                (
                    full_holders(&mut conn, k),
                    queued_weights(&mut conn, k),
                    digest(&mut conn, k),
                )
            })
            .collect();
        // Replayed from the commands as logged, then from a rewrite.
        server.kill();
        server.restart();
        let mut conn = server.connect();
        let replayed: Vec<_> = WORKLOAD_KEYS
            .iter()
            .map(|k| {
                (
                    full_holders(&mut conn, k),
                    queued_weights(&mut conn, k),
                    digest(&mut conn, k),
                )
            })
            .collect();
        assert_eq!(replayed, before, "AOF replay, preamble {preamble}");
        let _: Value = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
        wait_until("the AOF rewrite to finish", || {
            info_field(&mut conn, "persistence", "aof_rewrite_in_progress") == "0"
                && info_field(&mut conn, "persistence", "aof_rewrite_scheduled") == "0"
        });
        server.kill();
        server.restart();
        let mut conn = server.connect();
        let rewritten: Vec<_> = WORKLOAD_KEYS
            .iter()
            .map(|k| {
                (
                    full_holders(&mut conn, k),
                    queued_weights(&mut conn, k),
                    digest(&mut conn, k),
                )
            })
            .collect();
        assert_eq!(rewritten, before, "AOF rewrite, preamble {preamble}");
    }
}
