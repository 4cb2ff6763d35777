//! The command contract of DLOCK.ACQUIRE, RELEASE, RENEW and INFO against a
//! real redis-server.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn acquire_grants_a_free_lock() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, holds, owner) = acquire(&mut conn, "job", "worker-1", 10_000).expect("granted");
    assert!(token > 0);
    assert_eq!(holds, 1);
    assert_eq!(owner, b"worker-1");
    assert_eq!(info_owner(&mut conn, "job"), Some(b"worker-1".to_vec()));
    assert_eq!(info_int(&mut conn, "job", "holds"), 1);
    assert_eq!(info_int(&mut conn, "job", "token"), token);
    assert_eq!(info_int(&mut conn, "job", "waiting"), 0);
    let pttl = info_int(&mut conn, "job", "pttl");
    assert!((9_000..=10_000).contains(&pttl), "pttl {pttl}");
    let key_pttl = int(&mut conn, &["PTTL", "job"]);
    assert!((9_000..=10_000).contains(&key_pttl), "key pttl {key_pttl}");
}

#[test]
fn reentry_counts_keeps_the_token_and_resets_the_lease() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "job", "me", 1_000).unwrap();
    let (again, holds, _) = acquire(&mut conn, "job", "me", 60_000).unwrap();
    assert_eq!((again, holds), (token, 2));
    assert!(
        info_int(&mut conn, "job", "pttl") > 50_000,
        "lease reset to the new ttl"
    );
    assert!(
        int(&mut conn, &["PTTL", "job"]) > 50_000,
        "key expire follows the lease"
    );
}

#[test]
fn another_owner_gets_null_and_changes_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "job", "me", 10_000).unwrap();
    let before = info(&mut conn, "job");
    assert_eq!(acquire(&mut conn, "job", "you", 10_000), None);
    let after = info(&mut conn, "job");
    assert_eq!(
        before.map(|f| f[..3].to_vec()),
        after.map(|f| f[..3].to_vec())
    );
}

#[test]
fn release_counts_down_and_deletes_the_key_at_zero() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "job", "me", 10_000).unwrap();
    acquire(&mut conn, "job", "me", 10_000).unwrap();
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "job", "me"]), 1);
    assert_eq!(info_int(&mut conn, "job", "holds"), 1);
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "job", "me"]), 0);
    assert_eq!(int(&mut conn, &["EXISTS", "job"]), 0);
    assert_eq!(info(&mut conn, "job"), None);
    assert!(acquire(&mut conn, "job", "you", 10_000).is_some());
}

#[test]
fn release_and_renew_by_a_non_holder_are_notowner_and_change_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    for command in [
        &["DLOCK.RELEASE", "job", "me"][..],
        &["DLOCK.RENEW", "job", "me", "100"],
    ] {
        let error = error_of(&mut conn, command);
        assert!(error.starts_with("NOTOWNER"), "{error}");
        assert_eq!(int(&mut conn, &["EXISTS", "job"]), 0, "no key created");
    }
    acquire(&mut conn, "job", "me", 10_000).unwrap();
    let before = info(&mut conn, "job").map(|f| f[..3].to_vec());
    for command in [
        &["DLOCK.RELEASE", "job", "you"][..],
        &["DLOCK.RENEW", "job", "you", "100"],
    ] {
        let error = error_of(&mut conn, command);
        assert!(error.starts_with("NOTOWNER"), "{error}");
    }
    assert_eq!(info(&mut conn, "job").map(|f| f[..3].to_vec()), before);
    assert!(
        info_int(&mut conn, "job", "pttl") > 9_000,
        "renew by another owner changed the lease"
    );
}

#[test]
fn renew_resets_the_lease_and_returns_the_token() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "job", "me", 500).unwrap();
    acquire(&mut conn, "job", "me", 500).unwrap();
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "job", "me", "60000"]),
        token
    );
    assert!(info_int(&mut conn, "job", "pttl") > 50_000);
    assert!(int(&mut conn, &["PTTL", "job"]) > 50_000);
    assert_eq!(
        info_int(&mut conn, "job", "holds"),
        2,
        "renew keeps the holds"
    );
}

#[test]
fn an_expired_lease_frees_the_lock_and_removes_the_key_at_once() {
    let server = Server::start();
    let mut conn = server.connect();
    let started = Instant::now();
    let (first, _, _) = acquire(&mut conn, "job", "me", 200).unwrap();
    // The server granted it between `started` and now: the lease ends within
    // 200 ms (plus a millisecond of rounding) of this instant at the latest.
    let granted = Instant::now();
    let refused = acquire(&mut conn, "job", "you", 200);
    if started.elapsed() < Duration::from_millis(190) {
        assert_eq!(refused, None, "refused while the lease runs");
    }
    // Wait out the lease, then everything must see the lock free at once.
    let lease_over = granted + Duration::from_millis(202);
    while Instant::now() < lease_over {
        std::thread::sleep(lease_over - Instant::now());
    }
    assert_eq!(int(&mut conn, &["EXISTS", "job"]), 0);
    assert_eq!(
        cmd(&mut conn, &["TYPE", "job"]).unwrap(),
        Value::SimpleString("none".into())
    );
    assert_eq!(info(&mut conn, "job"), None);
    let error = error_of(&mut conn, &["DLOCK.RELEASE", "job", "me"]);
    assert!(
        error.starts_with("NOTOWNER"),
        "an expired holder cannot release: {error}"
    );
    let (second, holds, _) = acquire(&mut conn, "job", "you", 10_000).expect("free after expiry");
    assert!(second > first);
    assert_eq!(holds, 1);
}

#[test]
fn tokens_strictly_increase_across_keys_and_deletion() {
    let server = Server::start();
    let mut conn = server.connect();
    let mut last = 0;
    for round in 0..50 {
        let key = format!("k{}", round % 7);
        let (token, _, _) = acquire(&mut conn, &key, "me", 10_000).unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
        if round % 2 == 0 {
            assert_eq!(int(&mut conn, &["DLOCK.RELEASE", &key, "me"]), 0);
        } else {
            assert_eq!(int(&mut conn, &["DEL", &key]), 1);
        }
    }
}

#[test]
fn star_generates_a_uuid_owner() {
    let server = Server::start();
    let mut conn = server.connect();
    let (_, _, first) = acquire(&mut conn, "a", "*", 10_000).unwrap();
    let (_, _, second) = acquire(&mut conn, "b", "*", 10_000).unwrap();
    assert_eq!(first.len(), 36);
    let text = String::from_utf8(first.clone()).unwrap();
    let parts: Vec<&str> = text.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        vec![8, 4, 4, 4, 12]
    );
    assert!(parts[2].starts_with('4'), "version 4: {text}");
    assert!(text.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    assert_ne!(first, second);
    assert_eq!(info_owner(&mut conn, "a"), Some(first.clone()));
    assert_eq!(
        acquire(&mut conn, "a", "*", 10_000),
        None,
        "a new * is a new owner"
    );
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "a", &text]), 0);
}

#[test]
fn owners_are_binary_safe_strings() {
    let server = Server::start();
    let mut conn = server.connect();
    let owner: &[u8] = &[0x00, 0xff, b'\n', 0xc3, 0x28];
    let reply = run(&mut conn, &[b"DLOCK.ACQUIRE", b"bin", owner, b"10000"]).unwrap();
    assert_eq!(grant(reply).map(|g| g.2), Some(owner.to_vec()));
    let other: &[u8] = &[0x00, 0xff, b'\n', 0xc3];
    assert_eq!(
        grant(run(&mut conn, &[b"DLOCK.ACQUIRE", b"bin", other, b"10000"]).unwrap()),
        None
    );
    let max = "x".repeat(512);
    assert!(acquire(&mut conn, "long", &max, 10_000).is_some());
    assert_eq!(
        run(&mut conn, &[b"DLOCK.RELEASE", b"bin", owner]).unwrap(),
        Value::Int(0)
    );
    let key: &[u8] = &[0xfe, 0x00, 0x01];
    assert!(grant(run(&mut conn, &[b"DLOCK.ACQUIRE", key, b"me", b"10000"]).unwrap()).is_some());
}

#[test]
fn command_names_are_case_insensitive() {
    let server = Server::start();
    let mut conn = server.connect();
    assert!(grant(cmd(&mut conn, &["dlock.acquire", "k", "me", "1000"]).unwrap()).is_some());
    assert!(matches!(
        cmd(&mut conn, &["Dlock.Renew", "k", "me", "1000"]),
        Ok(Value::Int(_))
    ));
    assert!(matches!(
        cmd(&mut conn, &["dLOCK.info", "k"]),
        Ok(Value::Array(_))
    ));
    assert_eq!(
        cmd(&mut conn, &["DLOCK.release", "k", "me"]).unwrap(),
        Value::Int(0)
    );
}

#[test]
fn info_is_a_map_in_resp3_and_null_for_a_missing_key() {
    let server = Server::start();
    let mut conn = server.connect_resp3();
    assert_eq!(cmd(&mut conn, &["DLOCK.INFO", "none"]).unwrap(), Value::Nil);
    acquire(&mut conn, "job", "me", 10_000).unwrap();
    let reply = cmd(&mut conn, &["DLOCK.INFO", "job"]).unwrap();
    let Value::Map(pairs) = reply else {
        panic!("expected a map, got {reply:?}");
    };
    let names: Vec<String> = pairs
        .iter()
        .map(|(k, _)| match k {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    for field in ["owner", "holds", "token", "pttl", "waiting"] {
        assert!(
            names.iter().any(|n| n == field),
            "missing {field} in {names:?}"
        );
    }
}

#[test]
fn del_is_a_forced_release() {
    let server = Server::start();
    let mut conn = server.connect();
    let (first, _, _) = acquire(&mut conn, "job", "me", 60_000).unwrap();
    assert_eq!(int(&mut conn, &["DEL", "job"]), 1);
    let (second, _, _) = acquire(&mut conn, "job", "you", 60_000).expect("free after DEL");
    assert!(second > first);
    let error = error_of(&mut conn, &["DLOCK.RELEASE", "job", "me"]);
    assert!(error.starts_with("NOTOWNER"));
    assert_eq!(int(&mut conn, &["UNLINK", "job"]), 1);
    assert_eq!(info(&mut conn, "job"), None);
}

#[test]
fn lock_keys_behave_as_keys_for_generic_commands() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "lock:a", "me", 60_000).unwrap();
    redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query::<()>(&mut conn)
        .unwrap();
    assert_eq!(
        cmd(&mut conn, &["TYPE", "lock:a"]).unwrap(),
        Value::SimpleString("dlocklock".into())
    );
    assert_eq!(int(&mut conn, &["EXISTS", "lock:a"]), 1);
    let scanned: (String, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("TYPE")
        .arg("dlocklock")
        .arg("COUNT")
        .arg(1000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(scanned.1, vec!["lock:a".to_string()]);
    let usage = int(&mut conn, &["MEMORY", "USAGE", "lock:a"]);
    assert!(usage > 0);
}

#[test]
fn every_command_gives_wrongtype_on_other_types_and_changes_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    redis::cmd("SET")
        .arg("s")
        .arg("value")
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("LPUSH")
        .arg("l")
        .arg("x")
        .query::<()>(&mut conn)
        .unwrap();
    for key in ["s", "l"] {
        for command in [
            &["DLOCK.ACQUIRE", key, "me", "1000"][..],
            &["DLOCK.RELEASE", key, "me"],
            &["DLOCK.RENEW", key, "me", "1000"],
            &["DLOCK.INFO", key],
        ] {
            let error = error_of(&mut conn, command);
            assert!(error.starts_with("WRONGTYPE"), "{command:?}: {error}");
        }
    }
    let value: String = redis::cmd("GET").arg("s").query(&mut conn).unwrap();
    assert_eq!(value, "value");
    assert_eq!(int(&mut conn, &["PTTL", "s"]), -1);
}

#[test]
fn setstate_is_refused_from_clients() {
    let server = Server::start();
    let mut conn = server.connect();
    let error = error_of(
        &mut conn,
        &[
            "DLOCK.SETSTATE",
            "k",
            "HOLD",
            "forged",
            "1",
            "5",
            "99999999999999",
        ],
    );
    assert!(
        error.starts_with("ERR") && error.contains("internal"),
        "{error}"
    );
    assert_eq!(int(&mut conn, &["EXISTS", "k"]), 0);
}

/// Each malformed call: its arguments and the start of the error it must get.
const BAD_CALLS: &[(&[&str], &str)] = &[
    (
        &["DLOCK.ACQUIRE"],
        "ERR wrong number of arguments for 'dlock.acquire' command",
    ),
    (&["DLOCK.ACQUIRE", "k"], "ERR wrong number of arguments"),
    (
        &["DLOCK.ACQUIRE", "k", "me"],
        "ERR wrong number of arguments",
    ),
    (&["DLOCK.ACQUIRE", "k", "me", "0"], "ERR invalid ttl"),
    (&["DLOCK.ACQUIRE", "k", "me", "-5"], "ERR invalid ttl"),
    (&["DLOCK.ACQUIRE", "k", "me", "1.5"], "ERR invalid ttl"),
    (&["DLOCK.ACQUIRE", "k", "me", "abc"], "ERR invalid ttl"),
    (&["DLOCK.ACQUIRE", "k", "me", ""], "ERR invalid ttl"),
    (
        &["DLOCK.ACQUIRE", "k", "me", "9007199254740992"],
        "ERR invalid ttl",
    ),
    (
        &["DLOCK.ACQUIRE", "k", "me", "99999999999999999999999"],
        "ERR invalid ttl",
    ),
    (&["DLOCK.ACQUIRE", "k", "", "100"], "ERR invalid owner"),
    (
        &["DLOCK.ACQUIRE", "k", "me", "100", "BOGUS"],
        "ERR syntax error",
    ),
    (
        &["DLOCK.ACQUIRE", "k", "me", "100", "100"],
        "ERR syntax error",
    ),
    (
        &["DLOCK.RELEASE"],
        "ERR wrong number of arguments for 'dlock.release' command",
    ),
    (&["DLOCK.RELEASE", "k"], "ERR wrong number of arguments"),
    (&["DLOCK.RELEASE", "k", ""], "ERR invalid owner"),
    (&["DLOCK.RELEASE", "k", "me", "extra"], "ERR syntax error"),
    (
        &["DLOCK.RENEW", "k", "me"],
        "ERR wrong number of arguments for 'dlock.renew' command",
    ),
    (&["DLOCK.RENEW", "k", "me", "0"], "ERR invalid ttl"),
    (&["DLOCK.RENEW", "k", "me", "-1"], "ERR invalid ttl"),
    (&["DLOCK.RENEW", "k", "me", "1e3"], "ERR invalid ttl"),
    (&["DLOCK.RENEW", "k", "", "10"], "ERR invalid owner"),
    (
        &["DLOCK.RENEW", "k", "me", "10", "x"],
        "ERR wrong number of arguments",
    ),
    (
        &["DLOCK.INFO"],
        "ERR wrong number of arguments for 'dlock.info' command",
    ),
    (&["DLOCK.INFO", "k", "extra"], "ERR syntax error"),
];

#[test]
fn every_bad_input_gets_its_error_and_changes_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "k", "me", 60_000).unwrap();
    let long_owner = "x".repeat(513);
    let mut calls: Vec<(Vec<&str>, &str)> =
        BAD_CALLS.iter().map(|(a, e)| (a.to_vec(), *e)).collect();
    calls.push((
        vec!["DLOCK.ACQUIRE", "k", &long_owner, "100"],
        "ERR invalid owner",
    ));
    calls.push((vec!["DLOCK.RELEASE", "k", &long_owner], "ERR invalid owner"));
    for (args, expected) in calls {
        let error = error_of(&mut conn, &args);
        assert!(
            error.starts_with(expected),
            "{args:?}: got {error:?}, want {expected:?}"
        );
        assert_eq!(
            info_owner(&mut conn, "k"),
            Some(b"me".to_vec()),
            "{args:?} changed the owner"
        );
        assert_eq!(
            info_int(&mut conn, "k", "holds"),
            1,
            "{args:?} changed the holds"
        );
        assert_eq!(
            info_int(&mut conn, "k", "token"),
            token,
            "{args:?} changed the token"
        );
    }
    let ttl_error = error_of(&mut conn, &["DLOCK.ACQUIRE", "k", "me", "0"]);
    assert!(
        ttl_error.contains("ttl"),
        "the ttl error names the ttl: {ttl_error}"
    );
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    assert_eq!(keys, vec!["k".to_string()], "no error created a key");
    assert!(!server.log().contains("panicked"), "a panic was logged");
}

/// Whether the server hands modules the time of the running command
/// (`RedisModule_CachedMicroseconds`: Redis 7.2 and later, Valkey).
fn offers_command_time(conn: &mut redis::Connection) -> bool {
    let version = server_version(conn);
    version.valkey.is_some() || version.redis.as_slice() >= [7, 2].as_slice()
}

/// Leases start at the command's time where the server offers modules one,
/// the instant Redis itself judges key expiry and `SET .. PX` by; on Redis
/// 7.0 at the wall clock as the command runs. A transaction shows which:
/// its commands share one command time, while 3 ms pass inside it.
#[test]
fn leases_start_at_the_command_time_where_the_server_offers_one() {
    let server = Server::with_args(&["--enable-debug-command", "yes"]);
    let mut conn = server.connect();
    let _: Vec<redis::Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("first")
        .arg("owner")
        .arg(60_000)
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.003")
        .cmd("SET")
        .arg("plain")
        .arg("v")
        .arg("PX")
        .arg(60_000)
        .cmd("DLOCK.ACQUIRE")
        .arg("second")
        .arg("owner")
        .arg(60_000)
        .query(&mut conn)
        .expect("the transaction runs");
    let first = pexpiretime(&mut conn, "first");
    let plain = pexpiretime(&mut conn, "plain");
    let second = pexpiretime(&mut conn, "second");
    assert!(first > 0 && plain > 0 && second > 0);
    if offers_command_time(&mut conn) {
        assert_eq!(first, second, "one command time for the whole transaction");
        assert_eq!(first, plain, "the same time as SET .. PX");
    } else {
        assert!(
            second - first >= 3,
            "the wall clock as each command runs: {first} then {second}"
        );
    }
}
