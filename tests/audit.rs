//! The audit channel (`dlock.audit-channel`): off by default (no message),
//! and on, one message per event in the documented format, in order.
//! The Cluster shard channel is tested in tests/cluster.rs.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;

use common::*;

/// A raw pub/sub connection.
struct Subscriber {
    reader: BufReader<TcpStream>,
}

#[derive(Debug)]
enum Frame {
    Bulk(Vec<u8>),
    Int,
    Array(Vec<Frame>),
    Other,
}

impl Subscriber {
    fn open(server: &Server, command: &[&str]) -> Subscriber {
        let stream = send_raw(server, command);
        stream
            .set_read_timeout(Some(PATIENCE))
            .expect("read timeout");
        let mut subscriber = Subscriber {
            reader: BufReader::new(stream),
        };
        // The subscription's confirmation.
        subscriber.frame();
        subscriber
    }

    fn frame(&mut self) -> Frame {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("a frame");
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        match kind {
            "$" => {
                let len: usize = rest.parse().expect("bulk length");
                let mut bytes = vec![0; len + 2];
                self.reader.read_exact(&mut bytes).expect("bulk");
                bytes.truncate(len);
                Frame::Bulk(bytes)
            }
            ":" => Frame::Int,
            "*" | ">" => {
                let len: usize = rest.parse().expect("array length");
                Frame::Array((0..len).map(|_| self.frame()).collect())
            }
            _ => Frame::Other,
        }
    }

    /// The next message's (channel, payload).
    fn message(&mut self) -> (String, String) {
        match self.frame() {
            Frame::Array(items) => {
                let text = |frame: &Frame| match frame {
                    Frame::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => format!("{other:?}"),
                };
                // message: [kind, channel, payload]; pmessage: [kind, pattern, channel, payload]
                let n = items.len();
                (text(&items[n - 2]), text(&items[n - 1]))
            }
            other => panic!("not a message: {other:?}"),
        }
    }
}

/// The fields of an audit message, checked against the documented grammar.
fn fields(message: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let bytes = message.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let eq = i + message[i..].find('=').expect("name=value");
        let name = message[i..eq].to_string();
        i = eq + 1;
        let mut value = String::new();
        if bytes[i] == b'"' {
            i += 1;
            while bytes[i] != b'"' {
                if bytes[i] == b'\\' {
                    if bytes[i + 1] == b'x' {
                        let code = u8::from_str_radix(&message[i + 2..i + 4], 16).expect("hex");
                        value.push(code as char);
                        i += 4;
                    } else {
                        value.push(bytes[i + 1] as char);
                        i += 2;
                    }
                } else {
                    value.push(bytes[i] as char);
                    i += 1;
                }
            }
            i += 1;
        } else {
            while i < bytes.len() && bytes[i] != b' ' {
                value.push(bytes[i] as char);
                i += 1;
            }
        }
        out.push((name, value));
        assert!(
            i == bytes.len() || bytes[i] == b' ',
            "one space between fields"
        );
        i += 1;
    }
    let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["event", "time", "db", "key", "owner", "token", "holds"],
        "{message}"
    );
    out
}

/// (event, key, owner, token, holds) of a message; checks its time.
fn parse(message: &str, before_ms: i64) -> (String, String, String, i64, i64) {
    let f = fields(message);
    let time: i64 = f[1].1.parse().expect("time");
    assert!(
        time >= before_ms - 5 && time <= now_ms() + 5,
        "time {time} is not the publishing time: {message}"
    );
    assert_eq!(f[2].1, "0", "db: {message}");
    (
        f[0].1.clone(),
        f[3].1.clone(),
        f[4].1.clone(),
        f[5].1.parse().expect("token"),
        f[6].1.parse().expect("holds"),
    )
}

fn expect_event(subscriber: &mut Subscriber, started: i64, wanted: (&str, &str, &str, i64, i64)) {
    let (channel, message) = subscriber.message();
    assert_eq!(channel, "dlock-audit", "{message}");
    let got = parse(&message, started);
    assert_eq!(
        (got.0.as_str(), got.1.as_str(), got.2.as_str(), got.3, got.4),
        wanted,
        "{message}"
    );
}

/// Publishes a sentinel on `channel` and expects it as the next message:
/// nothing was published before it.
fn expect_nothing_more(conn: &mut Connection, subscriber: &mut Subscriber, channel: &str) {
    cmd(conn, &["PUBLISH", channel, "sentinel"]).expect("PUBLISH");
    let (got_channel, message) = subscriber.message();
    assert_eq!(
        (got_channel.as_str(), message.as_str()),
        (channel, "sentinel"),
        "an unexpected message came first"
    );
}

/// Every kind of event: acquire, re-entry, renew, reservation, hand-off,
/// timeout, release, expiry with a waiter and without, SESSION close.
fn run_every_event(server: &Server, conn: &mut Connection) {
    acquire(conn, "k", "a", 30_000).expect("acquire");
    acquire(conn, "k", "a", 30_000).expect("re-entry");
    int(conn, &["DLOCK.RENEW", "k", "a", "30000"]);
    let waiter = block_acquire(server, "k", "b", 30_000, 0);
    wait_for_waiting(conn, "k", 1);
    assert_eq!(
        cmd(conn, &["DLOCK.FAIR", "k", "c", "30000"]).expect("FAIR"),
        Value::Nil
    );
    let timed_out = block_acquire(server, "k", "d", 30_000, 50);
    timed_out.refused();
    release(conn, "k", "a");
    release(conn, "k", "a");
    waiter.granted();
    release(conn, "k", "b");
    acquire(conn, "k", "c", 30_000).expect("c's reservation");
    release(conn, "k", "c");
    // A lease that ends with a waiter queued, then one Redis expires.
    acquire(conn, "e", "x", 100).expect("acquire e");
    let next = block_acquire(server, "e", "y", 200, 0);
    next.granted();
    wait_until("e to be gone", || {
        cmd(conn, &["EXISTS", "e"]).expect("EXISTS") == Value::Int(0)
    });
    // A SESSION hold whose connection closes.
    let mut session = server.connect();
    cmd(
        &mut session,
        &["DLOCK.ACQUIRE", "s", "z", "30000", "SESSION"],
    )
    .expect("SESSION");
    drop(session);
    wait_until("the SESSION hold to end", || {
        cmd(conn, &["EXISTS", "s"]).expect("EXISTS") == Value::Int(0)
    });
}

#[test]
fn off_by_default_nothing_is_published() {
    let server = Server::start();
    let mut conn = server.connect();
    let default = cmd(&mut conn, &["CONFIG", "GET", "dlock.audit-channel"]).expect("CONFIG GET");
    assert_eq!(
        default,
        Value::Array(vec![
            Value::BulkString(b"dlock.audit-channel".to_vec()),
            Value::BulkString(Vec::new()),
        ])
    );
    let mut everything = Subscriber::open(&server, &["PSUBSCRIBE", "*"]);
    run_every_event(&server, &mut conn);
    expect_nothing_more(&mut conn, &mut everything, "after-the-events");

    // Turned on and off again: nothing either.
    config_set(&mut conn, "dlock.audit-channel", "dlock-audit");
    config_set(&mut conn, "dlock.audit-channel", "");
    acquire(&mut conn, "k", "a", 30_000).expect("acquire");
    release(&mut conn, "k", "a");
    expect_nothing_more(&mut conn, &mut everything, "after-off-again");
}

#[test]
fn a_channel_name_with_braces_is_refused() {
    let server = Server::start();
    let mut conn = server.connect();
    let error = error_of(&mut conn, &["CONFIG", "SET", "dlock.audit-channel", "a{b}"]);
    assert!(error.contains("must not contain { or }"), "{error}");
    let value = cmd(&mut conn, &["CONFIG", "GET", "dlock.audit-channel"]).expect("CONFIG GET");
    assert_eq!(
        value,
        Value::Array(vec![
            Value::BulkString(b"dlock.audit-channel".to_vec()),
            Value::BulkString(Vec::new()),
        ])
    );
}

#[test]
fn every_event_is_published_in_order() {
    let server = Server::start();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.audit-channel", "dlock-audit");
    let mut audit = Subscriber::open(&server, &["SUBSCRIBE", "dlock-audit"]);
    let started = now_ms();
    run_every_event(&server, &mut conn);

    // Tokens come from the messages themselves: a new hold's token is
    // larger than every earlier one, and re-entries, renewals and releases
    // repeat it.
    let next = |audit: &mut Subscriber| -> (String, String, String, i64, i64) {
        let (channel, message) = audit.message();
        assert_eq!(channel, "dlock-audit");
        parse(&message, started)
    };
    let a = next(&mut audit);
    assert_eq!(
        (a.0.as_str(), a.1.as_str(), a.2.as_str(), a.4),
        ("acquire", "k", "a", 1)
    );
    let ta = a.3;
    assert!(ta > 0);
    let expected_k: Vec<(&str, &str, i64, i64)> = vec![
        ("reenter", "a", ta, 2),
        ("renew", "a", ta, 2),
        ("reserve", "c", 0, 0),
        ("timeout", "d", 0, 0),
        ("release", "a", ta, 1),
        ("release", "a", ta, 0),
    ];
    for (event, owner, token, holds) in expected_k {
        let got = next(&mut audit);
        assert_eq!(
            (got.0.as_str(), got.1.as_str(), got.2.as_str(), got.3, got.4),
            (event, "k", owner, token, holds)
        );
    }
    let handoff = next(&mut audit);
    assert_eq!(
        (
            handoff.0.as_str(),
            handoff.1.as_str(),
            handoff.2.as_str(),
            handoff.4
        ),
        ("handoff", "k", "b", 1)
    );
    let tb = handoff.3;
    assert!(tb > ta, "the hand-off has a new, larger token");
    expect_event(&mut audit, started, ("release", "k", "b", tb, 0));
    let c = next(&mut audit);
    assert_eq!(
        (c.0.as_str(), c.1.as_str(), c.2.as_str(), c.4),
        ("acquire", "k", "c", 1)
    );
    let tc = c.3;
    assert!(tc > tb);
    expect_event(&mut audit, started, ("release", "k", "c", tc, 0));

    let x = next(&mut audit);
    assert_eq!(
        (x.0.as_str(), x.1.as_str(), x.2.as_str(), x.4),
        ("acquire", "e", "x", 1)
    );
    expect_event(&mut audit, started, ("expire", "e", "x", x.3, 1));
    let y = next(&mut audit);
    assert_eq!(
        (y.0.as_str(), y.1.as_str(), y.2.as_str(), y.4),
        ("handoff", "e", "y", 1)
    );
    assert!(y.3 > x.3);
    // y's lease (200 ms) ends with nobody queued: Redis expires the key.
    expect_event(&mut audit, started, ("expire", "e", "y", y.3, 1));

    let z = next(&mut audit);
    assert_eq!(
        (z.0.as_str(), z.1.as_str(), z.2.as_str(), z.4),
        ("acquire", "s", "z", 1)
    );
    expect_event(&mut audit, started, ("release", "s", "z", z.3, 0));
    expect_nothing_more(&mut conn, &mut audit, "dlock-audit");
}

#[test]
fn keys_and_owners_are_quoted() {
    let server = Server::start();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.audit-channel", "dlock-audit");
    let mut audit = Subscriber::open(&server, &["SUBSCRIBE", "dlock-audit"]);
    let key: &[u8] = b"key with \"quotes\" and \\";
    let owner: &[u8] = b"owner\n\xff =x";
    run(&mut conn, &[b"DLOCK.ACQUIRE", key, owner, b"30000"]).expect("acquire");
    let (_, message) = audit.message();
    assert!(
        message.contains(r#"key="key with \"quotes\" and \\" owner="owner\x0a\xff =x""#),
        "{message}"
    );
    let f = fields(&message);
    assert_eq!(f[3].1.as_bytes(), key);
    assert_eq!(
        f[4].1.chars().map(|c| c as u32 as u8).collect::<Vec<u8>>(),
        owner
    );
}

#[test]
fn shared_holds_publish_their_own_events() {
    let server = Server::start();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.audit-channel", "dlock-audit");
    let mut audit = Subscriber::open(&server, &["SUBSCRIBE", "dlock-audit"]);
    let started = now_ms();
    let shared = |conn: &mut Connection, owner: &str| {
        grant(cmd(conn, &["DLOCK.ACQUIRE", "rw", owner, "30000", "SHARED"]).expect("SHARED"))
            .expect("granted")
    };
    let (t1, _, _) = shared(&mut conn, "r1");
    shared(&mut conn, "r1");
    let writer = block_acquire(&server, "rw", "w", 30_000, 0);
    wait_for_waiting(&mut conn, "rw", 1);
    let reader = spawn_command(
        &server,
        &["DLOCK.ACQUIRE", "rw", "r2", "30000", "SHARED", "BLOCK", "0"],
    );
    wait_for_waiting(&mut conn, "rw", 2);
    int(&mut conn, &["DLOCK.RELEASE", "rw", "r1", "SHARED"]);
    int(&mut conn, &["DLOCK.RELEASE", "rw", "r1", "SHARED"]);
    let ((tw, _, _), _) = writer.granted();
    release(&mut conn, "rw", "w");
    let ((t2, _, _), _) = reader.granted();

    expect_event(&mut audit, started, ("acquire.shared", "rw", "r1", t1, 1));
    expect_event(&mut audit, started, ("reenter.shared", "rw", "r1", t1, 2));
    expect_event(&mut audit, started, ("release.shared", "rw", "r1", t1, 1));
    expect_event(&mut audit, started, ("release.shared", "rw", "r1", t1, 0));
    expect_event(&mut audit, started, ("handoff", "rw", "w", tw, 1));
    expect_event(&mut audit, started, ("release", "rw", "w", tw, 0));
    expect_event(&mut audit, started, ("handoff.shared", "rw", "r2", t2, 1));
    expect_nothing_more(&mut conn, &mut audit, "dlock-audit");
}
