//! Bad input: a table of malformed invocations (each with its error and no
//! change of state), random argument vectors against every command, and
//! corrupted DUMP payloads given to RESTORE. No input may crash the server.

use crate::common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The observable state: every key, its type, and each lock's fields.
fn state(conn: &mut Connection) -> Vec<String> {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    keys.sort();
    keys.iter()
        .map(|key| {
            let kind: String = redis::cmd("TYPE").arg(key).query(conn).unwrap();
            let detail = if kind == "dlocklock" {
                let reply = run(conn, &[b"DLOCK.INFO", key]).unwrap();
                match reply {
                    // Everything but the pttls, which run down by themselves.
                    Value::Array(items) => {
                        let holders: Vec<String> = match items.get(15) {
                            Some(Value::Array(holders)) => holders
                                .iter()
                                .map(|holder| match holder {
                                    Value::Array(fields) => format!("{:?}", &fields[..4]),
                                    other => format!("{other:?}"),
                                })
                                .collect(),
                            _ => Vec::new(),
                        };
                        format!("{:?} {:?} {holders:?}", &items[..6], &items[8..15])
                    }
                    other => format!("{other:?}"),
                }
            } else {
                String::new()
            };
            format!("{}:{kind}:{detail}", String::from_utf8_lossy(key))
        })
        .collect()
}

fn bad_calls() -> Vec<(Vec<Vec<u8>>, &'static str)> {
    let mut calls: Vec<(Vec<Vec<u8>>, &'static str)> = Vec::new();
    let mut add = |args: &[&[u8]], error: &'static str| {
        calls.push((args.iter().map(|a| a.to_vec()).collect(), error));
    };
    let bad_numbers: &[&[u8]] = &[
        b"",
        b"-1",
        b"-9223372036854775808",
        b"abc",
        b"1.5",
        b"1e3",
        b" 1",
        b"1 ",
        b"+1",
        b"0x10",
        b"01",
        b"99999999999999999999",
        b"-99999999999999999999",
        b"9007199254740992",
        b"18446744073709551616",
        b"\xff\xfe",
    ];
    for ttl in bad_numbers.iter().chain([&b"0"[..]].iter()) {
        add(&[b"DLOCK.ACQUIRE", b"k", b"me", ttl], "ERR invalid ttl");
        add(&[b"DLOCK.FAIR", b"k", b"me", ttl], "ERR invalid ttl");
        add(&[b"DLOCK.RENEW", b"k", b"holder", ttl], "ERR invalid ttl");
    }
    for timeout in bad_numbers {
        add(
            &[b"DLOCK.ACQUIRE", b"k", b"me", b"100", b"BLOCK", timeout],
            "ERR invalid timeout",
        );
        add(
            &[b"DLOCK.FAIR", b"k", b"me", b"100", b"BLOCK", timeout],
            "ERR invalid timeout",
        );
    }
    let long_owner = vec![b'o'; 513];
    for command in [&b"DLOCK.ACQUIRE"[..], b"DLOCK.FAIR", b"DLOCK.RENEW"] {
        add(&[command, b"k", b"", b"100"], "ERR invalid owner");
        add(&[command, b"k", &long_owner, b"100"], "ERR invalid owner");
        add(&[command], "ERR wrong number of arguments");
        add(&[command, b"k"], "ERR wrong number of arguments");
        add(&[command, b"k", b"me"], "ERR wrong number of arguments");
    }
    add(&[b"DLOCK.RELEASE", b"k", b""], "ERR invalid owner");
    add(&[b"DLOCK.RELEASE", b"k", &long_owner], "ERR invalid owner");
    for command in [&b"DLOCK.ACQUIRE"[..], b"DLOCK.FAIR"] {
        for options in [
            &[&b"BOGUS"[..]][..],
            &[b"NX"],
            &[b"BLOCK"],
            &[b"BLOCK", b"10", b"BLOCK", b"10"],
            &[b"SESSION", b"SESSION"],
            &[b"SESSION", b"BLOCK"],
            &[b"BLOCK", b"10", b"SESSION", b"extra"],
            &[b"100"],
            &[b"SESSIONS"],
            &[b"BLOCKING", b"1"],
        ] {
            let mut args: Vec<&[u8]> = vec![command, b"k", b"me", b"100"];
            args.extend_from_slice(options);
            add(&args, "ERR syntax error");
        }
    }
    for args in [
        &[&b"DLOCK.RELEASE"[..]][..],
        &[b"DLOCK.RELEASE", b"k"],
        &[b"DLOCK.RENEW", b"k", b"me", b"1", b"x"],
        &[b"DLOCK.INFO"],
    ] {
        add(args, "ERR wrong number of arguments");
    }
    add(&[b"DLOCK.INFO", b"k", b"x"], "ERR syntax error");
    add(&[b"DLOCK.INFO", b"k", b"FULL", b"FULL"], "ERR syntax error");
    add(&[b"DLOCK.RELEASE", b"k", b"me", b"x"], "ERR syntax error");
    add(
        &[b"DLOCK.RELEASE", b"k", b"me", b"SHARED", b"SHARED"],
        "ERR syntax error",
    );
    for command in [&b"DLOCK.ACQUIRE"[..], b"DLOCK.FAIR"] {
        for options in [
            &[&b"LIMIT"[..], b"3"][..],
            &[b"SHARED", b"SHARED"],
            &[b"SHARED", b"LIMIT"],
            &[b"SHARED", b"LIMIT", b"2", b"LIMIT", b"2"],
        ] {
            let mut args: Vec<&[u8]> = vec![command, b"k", b"me", b"100"];
            args.extend_from_slice(options);
            add(&args, "ERR syntax error");
        }
        for limit in [&b"0"[..], b"-1", b"4294967296", b"1.5", b"x"] {
            let args: Vec<&[u8]> = vec![command, b"k", b"me", b"100", b"SHARED", b"LIMIT", limit];
            add(&args, "ERR invalid limit");
        }
    }
    for command in [
        &[&b"DLOCK.ACQUIRE"[..], b"str", b"me", b"100"][..],
        &[b"DLOCK.FAIR", b"str", b"me", b"100"],
        &[b"DLOCK.ACQUIRE", b"list", b"me", b"100", b"BLOCK", b"10"],
        &[b"DLOCK.RELEASE", b"str", b"me"],
        &[b"DLOCK.RENEW", b"hash", b"me", b"100"],
        &[b"DLOCK.INFO", b"list"],
        &[b"DLOCK.INFO", b"hash"],
    ] {
        add(command, "WRONGTYPE");
    }
    for args in [
        &[&b"DLOCK.RELEASE"[..], b"k", b"stranger"][..],
        &[b"DLOCK.RELEASE", b"k", b"*"],
        &[b"DLOCK.RENEW", b"k", b"stranger", b"100"],
        &[b"DLOCK.RELEASE", b"missing", b"me"],
        &[b"DLOCK.RENEW", b"missing", b"me", b"100"],
        &[b"DLOCK.RELEASE", b"k", b"HOLDER"],
    ] {
        add(args, "NOTOWNER");
    }
    for args in [
        &[
            &b"DLOCK.SETSTATE"[..],
            b"k",
            b"HOLD",
            b"x",
            b"1",
            b"1",
            b"1",
        ][..],
        &[b"DLOCK.SETSTATE", b"k", b"FREE"],
        &[b"DLOCK.SETSTATE", b"k", b"RESERVE", b"x", b"1"],
        &[b"DLOCK.SETSTATE", b"k", b"BOGUS"],
    ] {
        add(args, "ERR DLOCK.SETSTATE is internal");
    }
    calls
}

#[test]
fn every_malformed_invocation_gets_its_error_and_changes_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "k", "holder", 600_000).unwrap();
    cmd(&mut conn, &["DLOCK.FAIR", "k", "queued", "600000"]).unwrap();
    cmd(&mut conn, &["SET", "str", "v"]).unwrap();
    cmd(&mut conn, &["RPUSH", "list", "v"]).unwrap();
    cmd(&mut conn, &["HSET", "hash", "f", "v"]).unwrap();
    let before = state(&mut conn);
    let calls = bad_calls();
    assert!(
        calls.len() >= 100,
        "only {} malformed invocations",
        calls.len()
    );
    for (args, expected) in &calls {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let error = match run(&mut conn, &refs) {
            Err(error) => error_text(&error),
            Ok(value) => panic!("{:?} replied {value:?}", printable(&refs)),
        };
        assert!(
            error.starts_with(expected),
            "{:?}: got {error:?}, want {expected:?}",
            printable(&refs)
        );
        assert_eq!(
            state(&mut conn),
            before,
            "{:?} changed state",
            printable(&refs)
        );
    }
    assert!(!server.log().contains("panicked"));
    println!("{} malformed invocations checked", calls.len());
}

fn printable(args: &[&[u8]]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
fn binary_and_non_utf8_owners_and_keys_are_ordinary_strings() {
    let server = Server::start();
    let mut conn = server.connect();
    let key: &[u8] = b"\x00\xff lock\r\n";
    let owner: &[u8] = b"\xc3\x28\x00\xfe";
    let reply = run(&mut conn, &[b"DLOCK.ACQUIRE", key, owner, b"60000"]).unwrap();
    assert_eq!(grant(reply).map(|g| g.2), Some(owner.to_vec()));
    let info = run(&mut conn, &[b"DLOCK.INFO", key]).unwrap();
    assert!(format!("{info:?}").contains("holds"));
    assert_eq!(
        run(&mut conn, &[b"DLOCK.RELEASE", key, owner]).unwrap(),
        Value::Int(0)
    );
}

/// A minimal RESP reader: skips one reply of any shape.
fn skip_reply(reader: &mut impl BufRead) -> std::io::Result<bool> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed",
        ));
    }
    let number = || -> i64 {
        std::str::from_utf8(&line[1..line.len() - 2])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1)
    };
    match line[0] {
        b'+' | b':' => Ok(false),
        b'-' => Ok(true),
        b'$' => {
            let len = number();
            if len >= 0 {
                let mut body = vec![0u8; len as usize + 2];
                std::io::Read::read_exact(reader, &mut body)?;
            }
            Ok(false)
        }
        b'*' => {
            for _ in 0..number().max(0) {
                skip_reply(reader)?;
            }
            Ok(false)
        }
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unexpected reply type {other}"),
        )),
    }
}

/// xorshift: a small deterministic generator, so a failure can be replayed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, items: &[&'a [u8]]) -> &'a [u8] {
        items[self.below(items.len() as u64) as usize]
    }
}

fn random_argument(random: &mut Random, previous: &[u8]) -> Vec<u8> {
    const WORDS: &[&[u8]] = &[
        b"BLOCK",
        b"block",
        b"SESSION",
        b"session",
        b"*",
        b"",
        b"k1",
        b"k2",
        b"k3",
        b"me",
        b"you",
        b"0",
        b"1",
        b"-1",
        b"100",
        b"60000",
        b"9007199254740991",
        b"9007199254740992",
        b"-9223372036854775808",
        b"9223372036854775807",
        b"1.5",
        b"nan",
        b"HOLD",
        b"FREE",
        b"RESERVE",
        b"\x00",
        b"\xff\xfe",
    ];
    if previous.eq_ignore_ascii_case(b"BLOCK") && random.below(8) != 0 {
        // Keep most blocking calls short; the watchdog unblocks the rest.
        return (1 + random.below(3)).to_string().into_bytes();
    }
    match random.below(4) {
        0 => {
            let len = random.below(24) as usize;
            (0..len).map(|_| random.next() as u8).collect()
        }
        1 => (random.next() as i64 >> random.below(64))
            .to_string()
            .into_bytes(),
        _ => random.pick(WORDS).to_vec(),
    }
}

fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn random_argument_vectors_never_hurt_the_server() {
    let total: usize = std::env::var("DLOCK_FUZZ_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let server = Server::start();
    let mut control = server.connect();
    let run_id_before: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut control)
        .unwrap();
    let run_id_before = run_id_line(&run_id_before);

    let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    cmd(&mut control, &["CLIENT", "SETNAME", "control"]).unwrap();

    // A watchdog unblocks fuzz calls that block for long (BLOCK 0 and the like).
    let port = server.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            let mut conn = client.get_connection().unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
                for line in clients.lines().filter(|l| l.contains("flags=b")) {
                    if let Some(id) = line.split(' ').find_map(|f| f.strip_prefix("id=")) {
                        let _: redis::RedisResult<Value> =
                            redis::cmd("CLIENT").arg("UNBLOCK").arg(id).query(&mut conn);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    const COMMANDS: &[&[u8]] = &[
        b"DLOCK.ACQUIRE",
        b"DLOCK.FAIR",
        b"DLOCK.RELEASE",
        b"DLOCK.RENEW",
        b"DLOCK.INFO",
        b"DLOCK.SETSTATE",
        b"DLOCK.LATCH",
        b"DLOCK.COUNTDOWN",
        b"DLOCK.AWAIT",
        b"DLOCK.LATCHSTATE",
        b"DLOCK.WATCH",
    ];
    let mut random = Random(0x5eed_d10c_u64);
    let mut errors = 0usize;
    let batch = 500;
    let mut sent = 0;
    while sent < total {
        let mut buffer = Vec::new();
        let count = batch.min(total - sent);
        for _ in 0..count {
            let mut args = vec![random.pick(COMMANDS).to_vec()];
            for _ in 0..random.below(8) {
                let previous = args.last().cloned().unwrap_or_default();
                args.push(random_argument(&mut random, &previous));
            }
            buffer.extend_from_slice(&encode(&args));
        }
        writer.write_all(&buffer).unwrap();
        for _ in 0..count {
            if skip_reply(&mut reader).expect("a reply for every call") {
                errors += 1;
            }
        }
        sent += count;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watchdog.join().unwrap();

    let pong: String = redis::cmd("PING").query(&mut control).unwrap();
    assert_eq!(pong, "PONG");
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut control)
        .unwrap();
    assert_eq!(run_id_line(&info), run_id_before, "the server restarted");
    let log = server.log();
    assert!(
        !log.contains("panicked") && !log.contains("internal error"),
        "{log}"
    );
    println!("{sent} random calls, {errors} error replies, server healthy");
}

fn run_id_line(info: &str) -> String {
    info.lines()
        .find(|line| line.starts_with("run_id:"))
        .unwrap_or_default()
        .to_string()
}

/// CRC-64/Jones, as DUMP payloads carry it.
fn crc64(bytes: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc: u64 = 0;
    for &byte in bytes {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `body` with a valid DUMP trailer (RDB version + CRC) taken from `original`.
fn with_trailer(body: &[u8], version: &[u8]) -> Vec<u8> {
    let mut payload = body.to_vec();
    payload.extend_from_slice(version);
    let crc = crc64(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

#[test]
fn corrupt_restore_payloads_are_rejected_never_crash() {
    let server = Server::start();
    let mut conn = server.connect();
    acquire(&mut conn, "k", "a-holder-name", 600_000).unwrap();
    cmd(&mut conn, &["DLOCK.FAIR", "k", "reserver", "600000"]).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut conn).unwrap();
    let (body, trailer) = dump.split_at(dump.len() - 10);
    let version = &trailer[..2];
    assert_eq!(
        crc64(&dump[..dump.len() - 8]).to_le_bytes(),
        dump[dump.len() - 8..],
        "CRC model"
    );

    let restore = |conn: &mut Connection, key: &str, payload: &[u8]| -> redis::RedisResult<Value> {
        redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(payload)
            .query(conn)
    };
    restore(&mut conn, "copy", &dump).unwrap();
    assert_eq!(
        info_owner(&mut conn, "copy"),
        Some(b"a-holder-name".to_vec())
    );

    let mut random = Random(0xc0ff_ee00_1234);
    let mut rejected = 0;
    let mut cases = 0;
    for len in 1..body.len() {
        cases += 1;
        match restore(&mut conn, "t", &with_trailer(&body[..len], version)) {
            Err(_) => rejected += 1,
            // Redis itself does not insist on the module value's end marker
            // (and a cut in the reservation list can still parse): what loads
            // must be a consistent lock made of the original's fields.
            Ok(_) => {
                assert_eq!(
                    info_owner(&mut conn, "t"),
                    Some(b"a-holder-name".to_vec()),
                    "cut at {len}"
                );
                assert_eq!(info_int(&mut conn, "t", "holds"), 1, "cut at {len}");
                assert!(info_int(&mut conn, "t", "waiting") <= 1, "cut at {len}");
            }
        }
        let _: () = redis::cmd("DEL").arg("t").query(&mut conn).unwrap();
    }
    assert!(
        rejected + 4 >= cases,
        "most truncated payloads are rejected: {rejected} of {cases}"
    );
    for _ in 0..2_000 {
        let mut corrupted = body.to_vec();
        for _ in 0..1 + random.below(3) {
            let at = 1 + random.below(corrupted.len() as u64 - 1) as usize;
            corrupted[at] = random.next() as u8;
        }
        if restore(&mut conn, "t", &with_trailer(&corrupted, version)).is_ok() {
            // Whatever loaded must be a readable lock.
            let reply = cmd(&mut conn, &["DLOCK.INFO", "t"]);
            assert!(reply.is_ok() || error_text(&reply.unwrap_err()).starts_with("WRONGTYPE"));
        }
        let _: () = redis::cmd("DEL").arg("t").query(&mut conn).unwrap();
        cases += 1;
    }
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
    assert!(!server.log().contains("panicked"));
    println!("{cases} corrupted payloads, server healthy");
}
