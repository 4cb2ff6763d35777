//! DLOCK.MACQUIRE: one atomic step takes a hold on every key or changes
//! nothing; with BLOCK the request waits in every key's queue at once, so
//! overlapping requests in any order all finish. Against real servers:
//! all-or-nothing, re-entry, SHARED with LIMIT per key, FIFO per key,
//! deadlock freedom, timeouts and SESSION leaving every key, replicas,
//! MULTI/scripts, metadata, and every error changing nothing.

use crate::common;

use common::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Grant = (i64, i64, Vec<u8>);

/// The grants of a MACQUIRE reply, None for null.
fn grants(value: Value) -> Option<Vec<Grant>> {
    match value {
        Value::Nil => None,
        Value::Array(items) => Some(
            items
                .into_iter()
                .map(|item| grant(item).expect("one grant per key"))
                .collect(),
        ),
        other => panic!("not a MACQUIRE reply: {other:?}"),
    }
}

/// `DLOCK.MACQUIRE n keys.. owner ttl options..`.
fn macquire_args(keys: &[&str], owner: &str, ttl: u64, options: &[&str]) -> Vec<String> {
    let mut args = vec!["DLOCK.MACQUIRE".to_string(), keys.len().to_string()];
    args.extend(keys.iter().map(|key| key.to_string()));
    args.push(owner.to_string());
    args.push(ttl.to_string());
    args.extend(options.iter().map(|option| option.to_string()));
    args
}

fn macquire(
    conn: &mut Connection,
    keys: &[&str],
    owner: &str,
    ttl: u64,
    options: &[&str],
) -> Option<Vec<Grant>> {
    let args = macquire_args(keys, owner, ttl, options);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    grants(cmd(conn, &args).expect("DLOCK.MACQUIRE"))
}

fn spawn_macquire(
    server: &Server,
    keys: &[&str],
    owner: &str,
    ttl: u64,
    options: &[&str],
) -> Pending {
    let args = macquire_args(keys, owner, ttl, options);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn_command(server, &args)
}

fn multi_granted(pending: Pending) -> Vec<Grant> {
    let (reply, _) = pending.join();
    grants(reply.expect("DLOCK.MACQUIRE failed")).expect("granted on every key")
}

fn digest(conn: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(conn).unwrap()
}

fn exists(conn: &mut Connection, key: &str) -> bool {
    int(conn, &["EXISTS", key]) == 1
}

#[test]
fn all_or_nothing_then_every_key_with_its_own_token() {
    let server = Server::start();
    let mut conn = server.connect();
    let (held_token, _, _) = acquire(&mut conn, "b", "other", 60_000).unwrap();
    assert_eq!(
        macquire(&mut conn, &["a", "b", "c"], "me", 60_000, &[]),
        None
    );
    assert!(
        !exists(&mut conn, "a") && !exists(&mut conn, "c"),
        "nothing taken"
    );
    assert_eq!(info_owner(&mut conn, "b"), Some(b"other".to_vec()));
    assert_eq!(info_int(&mut conn, "b", "token"), held_token);
    assert_eq!(waiting(&mut conn, "b"), 0, "no trace in the queue");

    assert_eq!(release(&mut conn, "b", "other"), 0);
    let granted = macquire(&mut conn, &["a", "b", "c"], "me", 60_000, &[]).unwrap();
    assert_eq!(granted.len(), 3);
    let tokens: Vec<i64> = granted.iter().map(|(token, _, _)| *token).collect();
    assert!(tokens.iter().all(|token| *token > held_token));
    assert_eq!(tokens.iter().collect::<HashSet<_>>().len(), 3, "{tokens:?}");
    for ((key, (token, holds, owner)), expected_token) in
        ["a", "b", "c"].iter().zip(&granted).zip(&tokens)
    {
        assert_eq!((*holds, owner.as_slice()), (1, &b"me"[..]));
        assert_eq!(info_owner(&mut conn, key), Some(b"me".to_vec()));
        assert_eq!(info_int(&mut conn, key, "token"), *expected_token);
        assert_eq!(*token, *expected_token);
    }
    // Ordinary holds: RELEASE and RENEW act on each key.
    assert!(int(&mut conn, &["DLOCK.RENEW", "a", "me", "90000"]) > 0);
    for key in ["a", "b", "c"] {
        assert_eq!(release(&mut conn, key, "me"), 0);
    }
    assert_eq!(int(&mut conn, &["DBSIZE"]), 0);
    // A generated owner is the same on every key.
    let generated = macquire(&mut conn, &["x", "y"], "*", 60_000, &[]).unwrap();
    assert_eq!(generated[0].2, generated[1].2);
    assert_eq!(generated[0].2.len(), 36);
}

#[test]
fn reentry_keeps_the_token_of_a_key_already_held() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token_a, _, _) = acquire(&mut conn, "a", "me", 60_000).unwrap();
    let granted = macquire(&mut conn, &["a", "b"], "me", 60_000, &[]).unwrap();
    assert_eq!(granted[0], (token_a, 2, b"me".to_vec()));
    assert_eq!(granted[1].1, 1);
    assert!(granted[1].0 > token_a);
    assert_eq!(info_int(&mut conn, "a", "holds"), 2);
    // Another owner re-entering nothing gets nothing.
    assert_eq!(macquire(&mut conn, &["b", "c"], "other", 60_000, &[]), None);
    assert!(!exists(&mut conn, "c"));
}

#[test]
fn shared_holds_with_limit_are_judged_per_key() {
    let server = Server::start();
    let mut conn = server.connect();
    let shared = ["SHARED", "LIMIT", "2"];
    assert!(macquire(&mut conn, &["a", "b"], "r1", 60_000, &shared).is_some());
    assert!(macquire(&mut conn, &["a", "b"], "r2", 60_000, &shared).is_some());
    assert_eq!(info_int(&mut conn, "a", "shared"), 2);
    // A third reader is over the LIMIT on both keys.
    assert_eq!(
        macquire(&mut conn, &["a", "b"], "r3", 60_000, &shared),
        None
    );
    // Without LIMIT a reader joins; a writer is refused while readers hold.
    assert!(macquire(&mut conn, &["a", "b"], "r3", 60_000, &["SHARED"]).is_some());
    assert_eq!(macquire(&mut conn, &["a", "c"], "w", 60_000, &[]), None);
    assert!(!exists(&mut conn, "c"));
    // r1 leaves a only: a has room under LIMIT 3, b does not, so nothing.
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "a", "r1", "SHARED"]), 0);
    let limit3 = ["SHARED", "LIMIT", "3"];
    assert_eq!(
        macquire(&mut conn, &["a", "b"], "r4", 60_000, &limit3),
        None
    );
    assert_eq!(info_int(&mut conn, "a", "shared"), 2, "a unchanged");
    assert!(macquire(&mut conn, &["a"], "r4", 60_000, &limit3).is_some());
    assert_eq!(info_int(&mut conn, "b", "shared"), 3);
}

#[test]
fn blocked_requests_wait_in_every_queue_in_fifo_order() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "a", "holder", 60_000).unwrap();
    let multi = spawn_macquire(&server, &["a", "b"], "multi", 60_000, &["BLOCK", "10000"]);
    wait_for_waiting(&mut conn, "a", 1);
    assert_eq!(
        queue(&mut conn, "b"),
        ["multi"],
        "it waits at the free key too"
    );
    // b is free, but its queue is headed by the multi-key request: no barging.
    let single = block_acquire(&server, "b", "single", 60_000, 10_000);
    wait_for_waiting(&mut conn, "b", 2);
    assert_eq!(queue(&mut conn, "b"), ["multi", "single"]);
    assert_eq!(acquire(&mut conn, "b", "barger", 60_000), None);
    assert!(!multi.is_finished() && !single.is_finished());

    assert_eq!(release(&mut conn, "a", "holder"), 0);
    let granted = multi_granted(multi);
    assert_eq!(granted.len(), 2);
    assert_eq!(info_owner(&mut conn, "a"), Some(b"multi".to_vec()));
    assert_eq!(info_owner(&mut conn, "b"), Some(b"multi".to_vec()));
    assert_eq!(queue(&mut conn, "a"), Vec::<String>::new());
    assert_eq!(queue(&mut conn, "b"), ["single"]);
    assert_eq!(release(&mut conn, "b", "multi"), 0);
    let ((_, holds, owner), _) = single.granted();
    assert_eq!((holds, owner.as_slice()), (1, &b"single"[..]));
}

#[test]
fn a_blocked_request_is_granted_only_when_every_key_is_free_at_once() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "a", "h1", 60_000).unwrap();
    acquire(&mut conn, "c", "h2", 60_000).unwrap();
    let multi = spawn_macquire(&server, &["a", "b", "c"], "m", 60_000, &["BLOCK", "0"]);
    wait_for_waiting(&mut conn, "c", 1);
    assert_eq!(release(&mut conn, "a", "h1"), 0);
    // a is free and headed by the request, but c is still held: it waits,
    // and keeps its place at a.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!multi.is_finished());
    assert_eq!(info_owner(&mut conn, "a"), None);
    assert_eq!(queue(&mut conn, "a"), ["m"]);
    assert_eq!(acquire(&mut conn, "a", "barger", 60_000), None);
    assert_eq!(release(&mut conn, "c", "h2"), 0);
    assert_eq!(multi_granted(multi).len(), 3);
    for key in ["a", "b", "c"] {
        assert_eq!(info_owner(&mut conn, key), Some(b"m".to_vec()), "{key}");
        assert_eq!(waiting(&mut conn, key), 0);
    }
    // A lease running out hands the keys on as well.
    let next = spawn_macquire(&server, &["c", "a"], "n", 60_000, &["BLOCK", "0"]);
    wait_for_waiting(&mut conn, "a", 1);
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "a", "m", "100"]),
        info_int(&mut conn, "a", "token")
    );
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "c", "m", "150"]),
        info_int(&mut conn, "c", "token")
    );
    let granted = multi_granted(next);
    assert_eq!(granted.len(), 2);
    assert_eq!(
        info_owner(&mut conn, "b"),
        Some(b"m".to_vec()),
        "b untouched"
    );
}

#[test]
fn timeouts_leave_every_queue() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "a", "holder", 60_000).unwrap();
    let started = Instant::now();
    let multi = spawn_macquire(&server, &["a", "b", "c"], "m", 60_000, &["BLOCK", "200"]);
    let at = multi.refused();
    assert!(at.duration_since(started) >= Duration::from_millis(190));
    assert_eq!(waiting(&mut conn, "a"), 0);
    assert!(!exists(&mut conn, "b") && !exists(&mut conn, "c"));
    assert_eq!(info_owner(&mut conn, "a"), Some(b"holder".to_vec()));
    // A disconnect leaves every queue too.
    let killed = spawn_macquire(&server, &["a", "b"], "k", 60_000, &["BLOCK", "0"]);
    wait_for_waiting(&mut conn, "b", 1);
    assert_eq!(
        int(&mut conn, &["CLIENT", "KILL", "ID", &killed.id.to_string()]),
        1
    );
    assert!(killed.join().0.is_err());
    wait_until("the killed request to leave b", || !exists(&mut conn, "b"));
    assert_eq!(waiting(&mut conn, "a"), 0);
    assert_eq!(info_number(&mut conn, "dlock", "dlock_multi_blocked"), 0);
}

#[test]
fn a_session_close_releases_every_key() {
    let server = Server::start();
    let mut conn = server.connect();
    let mut session = server.connect();
    let id = client_id_of(&mut session);
    assert!(macquire(&mut session, &["a", "b", "c"], "s", 600_000, &["SESSION"]).is_some());
    let waiter = spawn_macquire(&server, &["c", "b"], "next", 60_000, &["BLOCK", "10000"]);
    wait_for_waiting(&mut conn, "b", 1);
    assert_eq!(
        int(&mut conn, &["CLIENT", "KILL", "ID", &id.to_string()]),
        1
    );
    let granted = multi_granted(waiter);
    assert_eq!(granted.len(), 2);
    assert!(!exists(&mut conn, "a"), "a released with the session");
}

#[test]
fn multi_and_scripts_make_one_immediate_attempt() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "b", "other", 60_000).unwrap();
    let started = Instant::now();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.MACQUIRE")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("me")
        .arg(1000)
        .arg("BLOCK")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(replies, vec![Value::Nil]);
    let script = "return redis.call('DLOCK.MACQUIRE', 2, KEYS[1], KEYS[2], 'me', 1000, 'BLOCK', 0)";
    assert_eq!(
        cmd(&mut conn, &["EVAL", script, "2", "a", "b"]).unwrap(),
        Value::Nil
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!exists(&mut conn, "a"));
    let granted = grants(cmd(&mut conn, &["EVAL", script, "2", "a", "c"]).unwrap()).unwrap();
    assert_eq!(granted.len(), 2);
}

/// Many clients lock overlapping key sets, each in its own random order,
/// with BLOCK: requests that enter every queue in one step never wait on
/// each other in a cycle, so all finish, and no key ever has two holders.
#[test]
fn overlapping_requests_in_any_order_all_finish() {
    const CLIENTS: u64 = 12;
    const ROUNDS: u64 = 25;
    const KEYS: &[&str] = &["k0", "k1", "k2", "k3", "k4", "k5"];
    let server = Server::start();
    let in_use: Arc<Mutex<HashSet<String>>> = Arc::default();
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let port = server.port;
            let in_use = in_use.clone();
            std::thread::spawn(move || {
                let mut rng = TestRng::fork(0xdead_10c5, client);
                let mut conn = connect_port(port, WAITER_READ_TIMEOUT);
                let owner = format!("client-{client}");
                for _ in 0..ROUNDS {
                    let mut keys: Vec<&str> = KEYS.to_vec();
                    for i in (1..keys.len()).rev() {
                        keys.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    keys.truncate(rng.between(2, 4) as usize);
                    let granted = macquire(&mut conn, &keys, &owner, 30_000, &["BLOCK", "20000"])
                        .unwrap_or_else(|| panic!("{owner} timed out on {keys:?}: a deadlock"));
                    assert_eq!(granted.len(), keys.len());
                    {
                        let mut in_use = in_use.lock().unwrap();
                        for key in &keys {
                            assert!(in_use.insert(key.to_string()), "{key} held twice");
                        }
                    }
                    std::thread::sleep(Duration::from_micros(rng.below(2_000)));
                    {
                        let mut in_use = in_use.lock().unwrap();
                        for key in &keys {
                            in_use.remove(*key);
                        }
                    }
                    let mut pipe = redis::pipe();
                    for key in &keys {
                        pipe.cmd("DLOCK.RELEASE").arg(*key).arg(&owner);
                    }
                    let left: Vec<i64> = pipe.query(&mut conn).unwrap();
                    assert!(left.iter().all(|n| *n == 0), "{left:?}");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a client failed");
    }
    println!(
        "{} multi-key locks in {:?}",
        CLIENTS * ROUNDS,
        started.elapsed()
    );
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DBSIZE"]), 0, "every key released");
}

#[test]
fn replica_equals_master_after_multi_key_grants_and_hand_offs() {
    let master = server_with_debug();
    let replica = replica_of(&master, &["--enable-debug-command", "yes"]);
    let mut conn = master.connect();
    let mut on_replica = replica.connect();
    acquire(&mut conn, "b", "holder", 60_000).unwrap();
    assert!(macquire(&mut conn, &["a", "c"], "m1", 60_000, &[]).is_some());
    let blocked = spawn_macquire(&master, &["b", "d"], "m2", 60_000, &["BLOCK", "10000"]);
    wait_for_waiting(&mut conn, "d", 1);
    assert_eq!(release(&mut conn, "b", "holder"), 0);
    assert_eq!(multi_granted(blocked).len(), 2);
    assert!(macquire(
        &mut conn,
        &["e", "f"],
        "r",
        60_000,
        &["SHARED", "LIMIT", "4"]
    )
    .is_some());
    wait_for_replica(&mut conn);
    let keys = ["a", "b", "c", "d", "e", "f"];
    assert_eq!(snapshot(&mut on_replica, &keys), snapshot(&mut conn, &keys));
    assert_eq!(digest(&mut on_replica), digest(&mut conn));
    let error = error_of(&mut on_replica, &["DLOCK.MACQUIRE", "1", "z", "me", "1000"]);
    assert!(error.starts_with("READONLY"), "{error}");
}

#[test]
fn every_error_changes_nothing() {
    let server = server_with_debug();
    let mut conn = server.connect();
    acquire(&mut conn, "held", "owner", 60_000).unwrap();
    cmd(&mut conn, &["SET", "string", "value"]).unwrap();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "latch", "2", "60000"]), 1);
    let before = digest(&mut conn);
    let too_many = (MAX + 1).to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["DLOCK.MACQUIRE", "1", "a", "me"],
            "ERR wrong number of arguments",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "me", "100"],
            "ERR wrong number of arguments",
        ),
        (
            &["DLOCK.MACQUIRE", "0", "a", "me", "100"],
            "ERR invalid numkeys",
        ),
        (
            &["DLOCK.MACQUIRE", "-1", "a", "me", "100"],
            "ERR invalid numkeys",
        ),
        (
            &["DLOCK.MACQUIRE", &too_many, "a", "me", "100"],
            "ERR invalid numkeys",
        ),
        (
            &["DLOCK.MACQUIRE", "two", "a", "me", "100"],
            "ERR invalid numkeys",
        ),
        (
            &["DLOCK.MACQUIRE", "3", "a", "b", "a", "me", "100"],
            "ERR duplicate key 'a'",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "me", "0"],
            "ERR invalid ttl",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "", "100"],
            "ERR invalid owner",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "me", "100", "LIMIT", "2"],
            "ERR syntax error",
        ),
        (
            &[
                "DLOCK.MACQUIRE",
                "2",
                "a",
                "b",
                "me",
                "100",
                "SHARED",
                "LIMIT",
                "0",
            ],
            "ERR invalid limit",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "me", "100", "BLOCK", "-1"],
            "ERR invalid timeout",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "a", "b", "me", "100", "NX"],
            "ERR syntax error",
        ),
        (
            &["DLOCK.MACQUIRE", "3", "a", "string", "b", "me", "100"],
            "WRONGTYPE",
        ),
        (
            &[
                "DLOCK.MACQUIRE",
                "2",
                "a",
                "latch",
                "me",
                "100",
                "BLOCK",
                "0",
            ],
            "WRONGTYPE",
        ),
        (
            &["DLOCK.MACQUIRE", "2", "latch", "held", "me", "100"],
            "WRONGTYPE",
        ),
    ];
    for (args, prefix) in cases {
        let error = error_of(&mut conn, args);
        assert!(error.starts_with(prefix), "{args:?}: {error}");
    }
    assert_eq!(digest(&mut conn), before, "no error changed the dataset");
    assert_eq!(waiting(&mut conn, "held"), 0);
    // 1024 distinct keys are accepted.
    let names: Vec<String> = (0..MAX).map(|i| format!("{{t}}k{i}")).collect();
    let keys: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        macquire(&mut conn, &keys, "wide", 60_000, &[]).map(|g| g.len()),
        Some(MAX)
    );
}

const MAX: usize = 1024;

#[test]
fn metadata_describes_numkeys_and_movable_keys() {
    let server = Server::start();
    let mut conn = server.connect();
    let keys = cmd(
        &mut conn,
        &[
            "COMMAND",
            "GETKEYS",
            "DLOCK.MACQUIRE",
            "3",
            "a",
            "b",
            "c",
            "me",
            "100",
            "BLOCK",
            "5",
        ],
    )
    .unwrap();
    assert_eq!(
        keys,
        Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"b".to_vec()),
            Value::BulkString(b"c".to_vec()),
        ])
    );
    let info = format!(
        "{:?}",
        cmd(&mut conn, &["COMMAND", "INFO", "dlock.macquire"]).unwrap()
    );
    assert!(
        info.contains("movablekeys") && info.contains("write"),
        "{info}"
    );
    assert!(info.contains("keynum"), "a key spec by numkeys: {info}");
    let docs = format!(
        "{:?}",
        cmd(&mut conn, &["COMMAND", "DOCS", "dlock.macquire"]).unwrap()
    );
    for word in [
        "numkeys", "owner", "ttl", "SHARED", "LIMIT", "BLOCK", "SESSION",
    ] {
        assert!(docs.contains(word), "COMMAND DOCS lacks {word}: {docs}");
    }
    let granted = macquire(&mut conn, &["a"], "me", 60_000, &[]).unwrap();
    assert_eq!(granted.len(), 1);
    assert!(info_number(&mut conn, "dlock", "dlock_multi_acquires") >= 1);
}
