//! What Redis users expect of a module: command metadata (COMMAND DOCS,
//! COMMAND INFO, COMMAND GETKEYS), precise key specs for ACL, an INFO
//! section, module configuration, and keyspace events.

use crate::common;

use common::*;
use std::time::Duration;

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Int(number) => number.to_string(),
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>().join(" "),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| format!("{} {}", text(k), text(v)))
            .collect::<Vec<_>>()
            .join(" "),
        Value::Nil => "(nil)".into(),
        other => format!("{other:?}"),
    }
}

#[test]
fn command_docs_describe_every_command_and_its_arguments() {
    let server = Server::start();
    let mut conn = server.connect();
    for (command, must_mention) in [
        (
            "dlock.acquire",
            &[
                "key", "owner", "ttl", "BLOCK", "timeout", "SESSION", "optional",
            ][..],
        ),
        ("dlock.fair", &["owner", "ttl", "BLOCK", "SESSION"]),
        ("dlock.release", &["key", "owner"]),
        ("dlock.renew", &["owner", "ttl"]),
        ("dlock.info", &["key"]),
    ] {
        let docs = text(&cmd(&mut conn, &["COMMAND", "DOCS", command]).unwrap());
        assert!(
            docs.contains("summary") && docs.contains("since") && docs.contains("complexity"),
            "{docs}"
        );
        for word in must_mention {
            assert!(
                docs.contains(word),
                "COMMAND DOCS {command} lacks {word}: {docs}"
            );
        }
    }
}

#[test]
fn command_info_has_arity_flags_and_key_specs() {
    let server = Server::start();
    let mut conn = server.connect();
    let info = text(&cmd(&mut conn, &["COMMAND", "INFO", "dlock.info"]).unwrap());
    assert!(info.starts_with("dlock.info -2 "), "{info}");
    assert!(
        info.contains("readonly") && info.contains("fast") && info.contains("RO"),
        "{info}"
    );
    // No command is deny-oom: those that create state refuse themselves
    // over maxmemory, so that the module counts the refusals (tests/stats.rs);
    // those that only give back or extend what the caller holds run (as DEL
    // and PEXPIRE).
    for (command, arity, deny_oom) in [
        ("dlock.fair", -4, false),
        ("dlock.release", -3, false),
        ("dlock.renew", 4, false),
    ] {
        let writer = text(&cmd(&mut conn, &["COMMAND", "INFO", command]).unwrap());
        assert!(
            writer.starts_with(&format!("{command} {arity} ")),
            "{writer}"
        );
        assert!(
            writer.contains("write") && writer.contains("RW"),
            "{writer}"
        );
        assert_eq!(writer.contains("denyoom"), deny_oom, "{writer}");
    }
    let acquire = text(&cmd(&mut conn, &["COMMAND", "INFO", "dlock.acquire"]).unwrap());
    assert!(acquire.starts_with("dlock.acquire -4 "), "{acquire}");
    assert!(
        acquire.contains("write") && !acquire.contains("denyoom") && acquire.contains("RW"),
        "{acquire}"
    );
    let keys = text(
        &cmd(
            &mut conn,
            &[
                "COMMAND",
                "GETKEYS",
                "DLOCK.ACQUIRE",
                "lock:a",
                "me",
                "100",
                "BLOCK",
                "5",
            ],
        )
        .unwrap(),
    );
    assert_eq!(keys, "lock:a");
    let keys = text(
        &cmd(
            &mut conn,
            &["COMMAND", "GETKEYS", "DLOCK.RELEASE", "lock:b", "me"],
        )
        .unwrap(),
    );
    assert_eq!(keys, "lock:b");
}

#[test]
fn acl_key_patterns_and_read_only_permissions_apply() {
    let server = Server::start();
    let mut admin = server.connect();
    for rule in [
        &["ACL", "SETUSER", "app1", "on", ">pw", "~app1:*", "+@all"][..],
        &["ACL", "SETUSER", "reader", "on", ">pw", "%R~*", "+@all"],
    ] {
        cmd(&mut admin, rule).unwrap();
    }
    acquire(&mut admin, "app2:job", "x", 60_000).unwrap();

    let mut app1 = server.connect();
    cmd(&mut app1, &["AUTH", "app1", "pw"]).unwrap();
    assert!(acquire(&mut app1, "app1:job", "me", 60_000).is_some());
    let error = error_of(&mut app1, &["DLOCK.ACQUIRE", "app2:job", "me", "1000"]);
    assert!(error.starts_with("NOPERM"), "{error}");
    let error = error_of(&mut app1, &["DLOCK.INFO", "app2:job"]);
    assert!(error.starts_with("NOPERM"), "{error}");

    let mut reader = server.connect();
    cmd(&mut reader, &["AUTH", "reader", "pw"]).unwrap();
    assert_eq!(info_owner(&mut reader, "app2:job"), Some(b"x".to_vec()));
    for command in [
        &["DLOCK.ACQUIRE", "app2:job", "me", "1000"][..],
        &["DLOCK.FAIR", "app2:job", "me", "1000"],
        &["DLOCK.RELEASE", "app2:job", "x"],
        &["DLOCK.RENEW", "app2:job", "x", "1000"],
    ] {
        let error = error_of(&mut reader, command);
        assert!(error.starts_with("NOPERM"), "{command:?}: {error}");
    }
    assert_eq!(
        info_owner(&mut admin, "app2:job"),
        Some(b"x".to_vec()),
        "nothing changed"
    );
}

fn info_field(conn: &mut Connection, field: &str) -> u64 {
    let section: String = redis::cmd("INFO").arg("dlock").query(conn).unwrap();
    let prefix = format!("dlock_{field}:");
    section
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("INFO dlock has no {field}: {section}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn info_section_counts_what_happens() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "k", "a", 60_000).unwrap();
    acquire(&mut conn, "k", "a", 60_000).unwrap();
    int(&mut conn, &["DLOCK.RENEW", "k", "a", "60000"]);
    int(&mut conn, &["DLOCK.RELEASE", "k", "a"]);
    assert_eq!(
        cmd(&mut conn, &["DLOCK.FAIR", "k", "b", "1000"]).unwrap(),
        Value::Nil
    );
    let timed_out = cmd(
        &mut conn,
        &["DLOCK.ACQUIRE", "k", "c", "1000", "BLOCK", "20"],
    )
    .unwrap();
    assert_eq!(timed_out, Value::Nil);
    acquire(&mut conn, "short", "d", 30).unwrap();
    wait_until("the short lease to be expired by Redis", || {
        int(&mut conn, &["EXISTS", "short"]) == 0
    });
    assert_eq!(info_field(&mut conn, "acquires"), 2);
    assert_eq!(info_field(&mut conn, "reentries"), 1);
    assert_eq!(info_field(&mut conn, "renewals"), 1);
    assert_eq!(info_field(&mut conn, "releases"), 1);
    assert_eq!(info_field(&mut conn, "block_timeouts"), 1);
    assert_eq!(info_field(&mut conn, "reservations"), 1);
    assert_eq!(info_field(&mut conn, "blocked_clients"), 0);
    assert_eq!(info_field(&mut conn, "lease_expiries"), 1);
    assert!(info_field(&mut conn, "last_token") >= token as u64);
}

#[test]
fn fair_reservation_ms_is_a_module_config() {
    let server = Server::with_args(&["--save", "", "--appendonly", "no"]);
    let mut conn = server.connect();
    let get = |conn: &mut Connection| {
        text(&cmd(conn, &["CONFIG", "GET", "dlock.fair-reservation-ms"]).unwrap())
    };
    assert_eq!(get(&mut conn), "dlock.fair-reservation-ms 5000");
    cmd(
        &mut conn,
        &["CONFIG", "SET", "dlock.fair-reservation-ms", "250"],
    )
    .unwrap();
    assert_eq!(get(&mut conn), "dlock.fair-reservation-ms 250");
    let error = error_of(
        &mut conn,
        &["CONFIG", "SET", "dlock.fair-reservation-ms", "0"],
    );
    assert!(error.starts_with("ERR"), "{error}");
    acquire(&mut conn, "k", "a", 60_000).unwrap();
    cmd(&mut conn, &["DLOCK.FAIR", "k", "b", "1000"]).unwrap();
    let pttl = int(&mut conn, &["PTTL", "k"]);
    assert!(pttl > 50_000, "the key lives as long as the lease");
    assert_eq!(info_int(&mut conn, "k", "waiting"), 1);
    wait_until("the 250 ms reservation to run out", || {
        info_int(&mut conn, "k", "waiting") == 0
    });
}

#[test]
fn module_configs_are_accepted_as_loadmodule_arguments() {
    // The harness loads the module without arguments, so this server is
    // started by hand from a config file whose loadmodule line passes one.
    let conf = format!(
        "loadmodule {} fair-reservation-ms 1234\n",
        module_path().display()
    );
    let dir = std::env::temp_dir().join(format!("dlock-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("redis.conf");
    std::fs::write(&path, &conf).unwrap();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut child = std::process::Command::new(server_binary())
        .arg(&path)
        .args(["--port", &port.to_string(), "--save", "", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut conn = None;
    wait_until("the configured server to start", || {
        conn = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok();
        conn.is_some()
    });
    let mut conn = conn.unwrap();
    let value = text(&cmd(&mut conn, &["CONFIG", "GET", "dlock.fair-reservation-ms"]).unwrap());
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(value, "dlock.fair-reservation-ms 1234");
}

#[test]
fn lock_changes_are_published_as_keyspace_events() {
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
    cmd(
        &mut conn,
        &["CONFIG", "SET", "dlock.fair-reservation-ms", "50"],
    )
    .unwrap();
    acquire(&mut conn, "job", "a", 100).unwrap();
    acquire(&mut conn, "job", "a", 100).unwrap();
    int(&mut conn, &["DLOCK.RENEW", "job", "a", "100"]);
    int(&mut conn, &["DLOCK.RELEASE", "job", "a"]);
    cmd(&mut conn, &["DLOCK.FAIR", "job", "b", "100"]).unwrap();
    let mut waiter = server.connect();
    let handle = std::thread::spawn(move || {
        cmd(
            &mut waiter,
            &["DLOCK.ACQUIRE", "job", "c", "5000", "BLOCK", "0"],
        )
    });
    let granted = handle.join().unwrap().unwrap();
    assert!(grant(granted).is_some());

    let mut events = Vec::new();
    while events.len() < 7 {
        let message = pubsub.get_message().expect("a keyspace event");
        events.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(
        events,
        vec![
            "dlock.acquire",
            "dlock.reenter",
            "dlock.renew",
            "dlock.release",
            "dlock.reserve",
            "dlock.expire",
            "dlock.handoff"
        ]
    );
}

/// The `dlock.*` and `expired` keyspace events of `job`, in order, until
/// `count` `dlock.*` events have come.
fn lock_events(pubsub: &mut redis::PubSub<'_>, count: usize) -> (Vec<String>, bool) {
    let mut events = Vec::new();
    let mut redis_expired = false;
    while events.len() < count {
        let message = pubsub.get_message().expect("a keyspace event");
        let event = message.get_payload::<String>().unwrap();
        if event == "expired" {
            redis_expired = true;
        } else if event.starts_with("dlock.") {
            events.push(event);
        }
    }
    (events, redis_expired)
}

/// A lease end is the same lease end whoever sees it first: Redis expiring
/// the key (here lazily, on an access while the main thread was kept from
/// running the module's timer) or the module's timer. Either way it counts
/// in `dlock_lease_expiries`, publishes `dlock.expire`, and the waiter is
/// handed the lock next.
#[test]
fn a_lease_redis_expires_before_the_timer_publishes_expire_then_handoff() {
    let server = Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--notify-keyspace-events",
        "Kdx",
        "--enable-debug-command",
        "yes",
    ]);
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let mut subscriber = client.get_connection().unwrap();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:job").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut conn = server.connect();

    acquire(&mut conn, "job", "a", 60_000).unwrap();
    let waiter = spawn_command(
        &server,
        &["DLOCK.ACQUIRE", "job", "c", "5000", "BLOCK", "0"],
    );
    wait_for_waiting(&mut conn, "job", 1);
    // A short lease only now that the waiter is queued.
    int(&mut conn, &["DLOCK.RENEW", "job", "a", "100"]);
    // One write: Redis runs both commands before its event loop (and the
    // module's timer) runs again, so the access after the lease ended is
    // what removes the key.
    let (_, exists): ((), i64) = redis::pipe()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.3")
        .cmd("EXISTS")
        .arg("job")
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, 0, "Redis expired the key on access");
    let (_, _, owner) = waiter.granted().0;
    assert_eq!(owner, b"c");

    let (events, redis_expired) = lock_events(&mut pubsub, 4);
    assert!(redis_expired, "Redis, not the timer, ended the lease");
    assert_eq!(
        events,
        [
            "dlock.acquire",
            "dlock.renew",
            "dlock.expire",
            "dlock.handoff"
        ]
    );
    assert_eq!(info_field(&mut conn, "lease_expiries"), 1);
}

/// Redis 8's active expiry removes a key in its expire's own millisecond
/// (`now >= expire`), the lease's last one, before the module's timer
/// (armed for deadline + 1, when any server's lazy expiry removes the key
/// as the timer opens it). With the expiry cycle at its fastest (`hz 500`,
/// every 2 ms) Redis 8 does so in about one round in eight: before the fix
/// the test failed in 6 of 6 runs of these 40 rounds (each a few dozen
/// ms) on Redis 8, while Redis 7.0 and Valkey passed. Every round
/// must still publish `dlock.expire` before the hand-off and count one
/// lease expiry, as on the servers that expire a key only after its
/// deadline.
#[test]
fn a_lease_ended_by_active_expiry_publishes_expire_on_every_round() {
    let server = Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--notify-keyspace-events",
        "Kdx",
        "--hz",
        "500",
    ]);
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let mut subscriber = client.get_connection().unwrap();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:job").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut conn = server.connect();

    for round in 1..=40 {
        acquire(&mut conn, "job", "a", 60_000).unwrap();
        let waiter = spawn_command(
            &server,
            &["DLOCK.ACQUIRE", "job", "c", "5000", "BLOCK", "0"],
        );
        wait_for_waiting(&mut conn, "job", 1);
        // A short lease only now that the waiter is queued.
        int(&mut conn, &["DLOCK.RENEW", "job", "a", "20"]);
        let (_, _, owner) = waiter.granted().0;
        assert_eq!(owner, b"c");
        int(&mut conn, &["DLOCK.RELEASE", "job", "c"]);

        let (events, redis_expired) = lock_events(&mut pubsub, 5);
        assert_eq!(
            events,
            [
                "dlock.acquire",
                "dlock.renew",
                "dlock.expire",
                "dlock.handoff",
                "dlock.release"
            ],
            "round {round} (Redis expired the key: {redis_expired})"
        );
        assert_eq!(info_field(&mut conn, "lease_expiries"), round);
    }
}
