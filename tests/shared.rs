//! Shared holds (issue 11): the read-write lock and the semaphore in the same
//! lock and the same queue. Many readers at once; a waiting writer stops
//! later readers; batch grants on release, stopped by a writer; LIMIT as a
//! semaphore with FIFO hand-off; crashed holders (SESSION close, lease
//! expiry); downgrade, upgrade and the DEADLOCK refusal; re-entry while a
//! writer waits; tokens and per-holder leases; RELEASE SHARED; the `shared`
//! and `holders` fields of DLOCK.INFO (RESP2 and RESP3); FAIR SHARED
//! reservations; and every new error, which changes nothing.
//!
//! As in tests/waiting.rs, blocked commands run on their own connections
//! ([`spawn_command`]) and the tests wait for events (INFO `waiting`,
//! replies), sleeping only where the absence of an event is the point.

use crate::common;
use crate::sharedkit;

use common::*;
use sharedkit::*;
use std::time::{Duration, Instant};

/// "Promptly" on a shared, noisy machine: hand-offs take a few ms, the tests
/// ask only for this much.
const PROMPTLY: Duration = Duration::from_secs(1);

/// How long a test watches for something that must not happen.
const WATCH: Duration = Duration::from_millis(150);

const LONG: u64 = 60_000;

fn exists(conn: &mut Connection, key: &str) -> bool {
    int(conn, &["EXISTS", key]) == 1
}

fn assert_still_blocked(pending: &Pending, what: &str) {
    std::thread::sleep(WATCH);
    assert!(!pending.is_finished(), "{what}");
}

/// Waits for `pending` to be granted and checks the reply's owner and holds.
fn granted_to(pending: Pending, owner: &str, holds: i64) -> (i64, Instant) {
    let ((token, got_holds, got_owner), at) = pending.granted();
    assert_eq!(got_owner, owner.as_bytes(), "granted to the right owner");
    assert_eq!(got_holds, holds, "holds of {owner}'s grant");
    (token, at)
}

fn str_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------
// Readers and writers.
// ---------------------------------------------------------------------------

#[test]
fn many_readers_hold_the_lock_at_once() {
    let server = Server::start();
    let mut conn = server.connect();
    let before = info_number(&mut conn, "dlock", "dlock_shared_grants");
    let mut tokens = Vec::new();
    for i in 0..6 {
        let owner = format!("r{i}");
        let (token, holds, got) = shared(&mut conn, "doc", &owner, LONG).expect("a reader");
        assert_eq!((holds, str_of(&got)), (1, owner));
        tokens.push(token);
    }
    let mut sorted = tokens.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, tokens, "each reader a new, larger token");

    // Nobody holds it exclusively: the exclusive fields say so.
    assert_eq!(info_owner(&mut conn, "doc"), None);
    assert_eq!(info_int(&mut conn, "doc", "holds"), 0);
    assert_eq!(info_int(&mut conn, "doc", "token"), 0);
    assert_eq!(info_int(&mut conn, "doc", "pttl"), -1);
    assert_eq!(info_int(&mut conn, "doc", "shared"), 6);
    let list = holders(&mut conn, "doc");
    let expected: Vec<_> = (0..6)
        .map(|i| entry(&format!("r{i}"), 0, 1, tokens[i]))
        .collect();
    assert_eq!(list.iter().map(Holder::fixed).collect::<Vec<_>>(), expected);
    assert!(list
        .iter()
        .all(|h| h.pttl > 50_000 && h.pttl <= LONG as i64));

    // A writer without BLOCK is refused and leaves no trace.
    assert_eq!(exclusive(&mut conn, "doc", "w", LONG), None);
    assert_eq!(waiting(&mut conn, "doc"), 0);
    assert_eq!(holder_counts(&mut conn, "doc"), expected);
    assert_eq!(
        info_number(&mut conn, "dlock", "dlock_shared_grants"),
        before + 6,
        "INFO dlock counts the shared grants"
    );

    for i in 0..6 {
        assert_eq!(release_shared(&mut conn, "doc", &format!("r{i}")), 0);
        assert_eq!(shared_owners(&mut conn, "doc"), 5 - i as i64);
    }
    assert!(!exists(&mut conn, "doc"), "free with an empty queue: gone");
    assert!(exclusive(&mut conn, "doc", "w", LONG).is_some());
}

#[test]
fn a_writer_waits_for_the_readers_and_later_readers_wait_behind_it() {
    let server = Server::start();
    let mut conn = server.connect();
    let (r1, _, _) = shared(&mut conn, "doc", "r1", LONG).unwrap();
    shared(&mut conn, "doc", "r2", LONG).unwrap();
    let writer = block_acquire(&server, "doc", "w", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);

    // A new reader does not pass the waiting writer, with or without BLOCK.
    assert_eq!(shared(&mut conn, "doc", "r3", LONG), None);
    assert_eq!(queue(&mut conn, "doc"), strings(&["w"]));
    let late_reader = block_shared(&server, "doc", "r3", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 2);
    assert_eq!(queue(&mut conn, "doc"), strings(&["w", "r3"]));

    // A reader already holding re-enters at once (it would otherwise deadlock
    // behind its own writer).
    assert_eq!(
        shared(&mut conn, "doc", "r1", LONG),
        Some((r1, 2, b"r1".to_vec()))
    );

    assert_eq!(release_shared(&mut conn, "doc", "r1"), 1);
    assert_eq!(release_shared(&mut conn, "doc", "r1"), 0);
    assert_still_blocked(&writer, "the writer waits while r2 reads");
    assert_eq!(release_shared(&mut conn, "doc", "r2"), 0);
    let (w, at) = granted_to(writer, "w", 1);
    assert!(w > r1);
    assert_eq!(info_owner(&mut conn, "doc"), Some(b"w".to_vec()));
    assert_eq!(shared_owners(&mut conn, "doc"), 0);
    assert!(at.elapsed() < Duration::from_secs(10));
    assert_still_blocked(&late_reader, "the late reader waits for the writer");
    assert_eq!(queue(&mut conn, "doc"), strings(&["r3"]));

    assert_eq!(release(&mut conn, "doc", "w"), 0);
    let (r3, _) = granted_to(late_reader, "r3", 1);
    assert!(r3 > w);
    assert_eq!(holder_counts(&mut conn, "doc"), vec![entry("r3", 0, 1, r3)]);
}

#[test]
fn a_release_grants_consecutive_readers_together_and_stops_at_a_writer() {
    let server = Server::start();
    let mut conn = server.connect();
    let (first, _, _) = exclusive(&mut conn, "doc", "w1", LONG).unwrap();
    let mut readers = Vec::new();
    for i in 0..4 {
        readers.push(block_shared(&server, "doc", &format!("r{i}"), LONG, 20_000));
        wait_for_waiting(&mut conn, "doc", i + 1);
    }
    let writer = block_acquire(&server, "doc", "w2", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 5);
    let after_writer = block_shared(&server, "doc", "r9", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 6);
    assert_eq!(
        queue(&mut conn, "doc"),
        strings(&["r0", "r1", "r2", "r3", "w2", "r9"])
    );

    assert_eq!(release(&mut conn, "doc", "w1"), 0);
    let mut tokens = Vec::new();
    for (i, pending) in readers.into_iter().enumerate() {
        let (token, _) = granted_to(pending, &format!("r{i}"), 1);
        tokens.push(token);
    }
    assert!(tokens[0] > first);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "the batch is granted in queue order: {tokens:?}"
    );
    // The batch stopped at the writer: it and the reader behind it wait.
    assert_eq!(queue(&mut conn, "doc"), strings(&["w2", "r9"]));
    assert_eq!(shared_owners(&mut conn, "doc"), 4);
    let expected: Vec<_> = (0..4)
        .map(|i| entry(&format!("r{i}"), 0, 1, tokens[i]))
        .collect();
    assert_eq!(holder_counts(&mut conn, "doc"), expected);
    assert_still_blocked(&writer, "the writer waits for the batch");
    assert!(!after_writer.is_finished(), "r9 stays behind the writer");

    for i in 0..4 {
        assert_eq!(release_shared(&mut conn, "doc", &format!("r{i}")), 0);
    }
    let (w2, _) = granted_to(writer, "w2", 1);
    assert!(w2 > tokens[3]);
    assert_still_blocked(&after_writer, "r9 waits for w2");
    assert_eq!(release(&mut conn, "doc", "w2"), 0);
    granted_to(after_writer, "r9", 1);
}

#[test]
fn deleting_the_key_hands_it_to_a_batch_of_waiting_readers() {
    let server = Server::start();
    let mut conn = server.connect();
    exclusive(&mut conn, "doc", "w", LONG).unwrap();
    let r1 = block_shared(&server, "doc", "r1", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    let r2 = block_shared(&server, "doc", "r2", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 2);
    let w2 = block_acquire(&server, "doc", "w2", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 3);
    assert_eq!(int(&mut conn, &["DEL", "doc"]), 1);
    granted_to(r1, "r1", 1);
    granted_to(r2, "r2", 1);
    assert_eq!(shared_owners(&mut conn, "doc"), 2);
    assert_eq!(queue(&mut conn, "doc"), strings(&["w2"]));
    assert_still_blocked(&w2, "the writer waits for the readers");
    assert!(cmd(&mut conn, &["DLOCK.RELEASE", "doc", "w"]).is_err());
    release_shared(&mut conn, "doc", "r1");
    release_shared(&mut conn, "doc", "r2");
    granted_to(w2, "w2", 1);
}

// ---------------------------------------------------------------------------
// LIMIT: the semaphore.
// ---------------------------------------------------------------------------

#[test]
fn limit_makes_a_semaphore_with_fifo_hand_off() {
    let server = Server::start();
    let mut conn = server.connect();
    let (s1, _, _) = permit(&mut conn, "api", "s1", LONG, 2).unwrap();
    let (s2, _, _) = permit(&mut conn, "api", "s2", LONG, 2).unwrap();
    assert!(s2 > s1);
    assert_eq!(permit(&mut conn, "api", "s3", LONG, 2), None, "full");
    assert_eq!(waiting(&mut conn, "api"), 0, "a refusal queues nothing");
    // A re-entry counts the same owner once, and never queues.
    assert_eq!(
        permit(&mut conn, "api", "s1", LONG, 2),
        Some((s1, 2, b"s1".to_vec()))
    );
    assert_eq!(
        permit(&mut conn, "api", "s1", LONG, 1),
        Some((s1, 3, b"s1".to_vec())),
        "re-entry whatever LIMIT it passes now"
    );

    let mut waiters = Vec::new();
    for (i, owner) in ["s3", "s4", "s5"].iter().enumerate() {
        waiters.push(block_with(
            &server,
            "api",
            owner,
            LONG,
            20_000,
            &["SHARED", "LIMIT", "2"],
        ));
        wait_for_waiting(&mut conn, "api", i as i64 + 1);
    }
    assert_eq!(queue(&mut conn, "api"), strings(&["s3", "s4", "s5"]));
    let mut waiters = waiters.into_iter();
    let (s3w, s4w, s5w) = (
        waiters.next().unwrap(),
        waiters.next().unwrap(),
        waiters.next().unwrap(),
    );

    // One slot frees (s2 leaves): exactly the head gets it.
    assert_eq!(release_shared(&mut conn, "api", "s2"), 0);
    let (s3, _) = granted_to(s3w, "s3", 1);
    assert!(s3 > s2);
    assert_eq!(shared_owners(&mut conn, "api"), 2);
    assert_still_blocked(&s4w, "s4 waits: two of two slots are taken");
    assert_eq!(queue(&mut conn, "api"), strings(&["s4", "s5"]));

    // s1 gives up its three holds; the slot is free only after the last.
    assert_eq!(release_shared(&mut conn, "api", "s1"), 2);
    assert_eq!(release_shared(&mut conn, "api", "s1"), 1);
    assert!(!s4w.is_finished());
    assert_eq!(release_shared(&mut conn, "api", "s1"), 0);
    let (s4, _) = granted_to(s4w, "s4", 1);
    assert!(s4 > s3);
    assert_still_blocked(&s5w, "s5 waits");
    assert_eq!(release_shared(&mut conn, "api", "s3"), 0);
    let (s5, _) = granted_to(s5w, "s5", 1);
    assert!(s5 > s4);
    assert_eq!(
        holder_counts(&mut conn, "api"),
        vec![entry("s4", 0, 1, s4), entry("s5", 0, 1, s5)]
    );
}

#[test]
fn the_limit_travels_with_each_request() {
    let server = Server::start();
    let mut conn = server.connect();
    permit(&mut conn, "api", "a", LONG, 2).unwrap();
    permit(&mut conn, "api", "b", LONG, 2).unwrap();
    // With LIMIT 3 there is room for a third owner, and without LIMIT for
    // any number.
    assert!(permit(&mut conn, "api", "c", LONG, 3).is_some());
    assert_eq!(permit(&mut conn, "api", "d", LONG, 3), None);
    assert!(shared(&mut conn, "api", "d", LONG).is_some());
    assert_eq!(permit(&mut conn, "api", "e", LONG, 4), None);
    assert!(permit(&mut conn, "api", "e", LONG, 5).is_some());
    assert_eq!(shared_owners(&mut conn, "api"), 5);
    // LIMIT 1 on an idle lock: a one-permit semaphore.
    assert!(permit(&mut conn, "one", "a", LONG, 1).is_some());
    assert_eq!(permit(&mut conn, "one", "b", LONG, 1), None);
    // A writer still excludes everyone.
    assert_eq!(exclusive(&mut conn, "api", "w", LONG), None);

    // A waiting head whose own limit is not met stops the batch even when
    // a request behind it would fit.
    let narrow = block_with(&server, "api", "n", LONG, 20_000, &["SHARED", "LIMIT", "5"]);
    wait_for_waiting(&mut conn, "api", 1);
    let wide = block_with(&server, "api", "m", LONG, 20_000, &["SHARED"]);
    wait_for_waiting(&mut conn, "api", 2);
    assert_eq!(release_shared(&mut conn, "api", "e"), 0);
    granted_to(narrow, "n", 1);
    granted_to(wide, "m", 1);
    assert_eq!(shared_owners(&mut conn, "api"), 6);

    let narrow = block_with(&server, "api", "x", LONG, 20_000, &["SHARED", "LIMIT", "6"]);
    wait_for_waiting(&mut conn, "api", 1);
    let wide = block_with(&server, "api", "y", LONG, 20_000, &["SHARED"]);
    wait_for_waiting(&mut conn, "api", 2);
    assert_still_blocked(&wide, "no barging past the head whose LIMIT is not met");
    assert_eq!(release_shared(&mut conn, "api", "m"), 0);
    granted_to(narrow, "x", 1);
    granted_to(wide, "y", 1);
}

#[test]
fn a_crashed_semaphore_holder_frees_its_slot_at_once() {
    let server = Server::start();
    let mut conn = server.connect();
    // SESSION: the holder's connection is killed.
    let mut holder = server.connect();
    let holder_id = client_id_of(&mut holder);
    let (_, _, _) = take(
        &mut holder,
        "DLOCK.ACQUIRE",
        "api",
        "crashy",
        LONG,
        &["SHARED", "LIMIT", "2", "SESSION"],
    )
    .unwrap();
    permit(&mut conn, "api", "steady", LONG, 2).unwrap();
    let waiter = block_with(
        &server,
        "api",
        "next",
        LONG,
        20_000,
        &["SHARED", "LIMIT", "2"],
    );
    wait_for_waiting(&mut conn, "api", 1);
    let killed_at = Instant::now();
    assert_eq!(
        int(&mut conn, &["CLIENT", "KILL", "ID", &holder_id.to_string()]),
        1
    );
    let (_, at) = granted_to(waiter, "next", 1);
    assert!(
        at.duration_since(killed_at) < PROMPTLY,
        "the slot came free {:?} after the kill",
        at.duration_since(killed_at)
    );
    let owners: Vec<String> = holders(&mut conn, "api")
        .into_iter()
        .map(|h| h.owner)
        .collect();
    assert_eq!(owners, strings(&["steady", "next"]));

    // A connection that just goes away frees its slot the same way.
    let key = "api2";
    let dropped = send_raw(
        &server,
        &[
            "DLOCK.ACQUIRE",
            key,
            "gone",
            "60000",
            "SESSION",
            "LIMIT",
            "1",
            "SHARED",
        ],
    );
    wait_until("the raw client to hold a permit", || {
        shared_owners(&mut conn, key) == 1
    });
    let waiter = block_with(
        &server,
        key,
        "after",
        LONG,
        20_000,
        &["SHARED", "LIMIT", "1"],
    );
    wait_for_waiting(&mut conn, key, 1);
    let closed_at = Instant::now();
    drop(dropped);
    let (_, at) = granted_to(waiter, "after", 1);
    assert!(at.duration_since(closed_at) < PROMPTLY);

    // Lease expiry: a 200 ms permit whose holder never comes back.
    let key = "api3";
    let (_, _, _) = permit(&mut conn, key, "lapsed", 200, 1).unwrap();
    let granted_at = Instant::now();
    let waiter = block_with(
        &server,
        key,
        "heir",
        LONG,
        20_000,
        &["SHARED", "LIMIT", "1"],
    );
    let (_, at) = granted_to(waiter, "heir", 1);
    let after = at.duration_since(granted_at);
    assert!(
        after >= Duration::from_millis(150) && after < Duration::from_millis(200) + PROMPTLY,
        "handed on {after:?} after a 200 ms lease began"
    );
    assert!(cmd(&mut conn, &["DLOCK.RELEASE", key, "lapsed", "SHARED"]).is_err());
}

// ---------------------------------------------------------------------------
// Downgrade, upgrade, DEADLOCK.
// ---------------------------------------------------------------------------

#[test]
fn a_downgrade_hands_the_lock_to_queued_readers_at_once() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = exclusive(&mut conn, "doc", "w", LONG).unwrap();
    let r1 = block_shared(&server, "doc", "r1", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    let r2 = block_shared(&server, "doc", "r2", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 2);
    let w2 = block_acquire(&server, "doc", "w2", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 3);

    // The writer takes a shared hold at once (re-entry), keeping its token.
    assert_eq!(
        shared(&mut conn, "doc", "w", LONG),
        Some((token, 1, b"w".to_vec()))
    );
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("w", 1, 1, token)]
    );
    assert_eq!(info_owner(&mut conn, "doc"), Some(b"w".to_vec()));
    assert_eq!(info_int(&mut conn, "doc", "holds"), 1);
    assert_eq!(info_int(&mut conn, "doc", "shared"), 1);
    assert!(!r1.is_finished());

    // Releasing the exclusive hold leaves w reading and lets the readers in.
    assert_eq!(release(&mut conn, "doc", "w"), 1, "one shared hold left");
    let released = Instant::now();
    let (t1, at1) = granted_to(r1, "r1", 1);
    let (t2, at2) = granted_to(r2, "r2", 1);
    assert!(at1.duration_since(released) < PROMPTLY && at2.duration_since(released) < PROMPTLY);
    assert!(token < t1 && t1 < t2);
    assert_eq!(info_owner(&mut conn, "doc"), None);
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![
            entry("w", 0, 1, token),
            entry("r1", 0, 1, t1),
            entry("r2", 0, 1, t2)
        ]
    );
    assert_eq!(int(&mut conn, &["DLOCK.RENEW", "doc", "w", "60000"]), token);
    assert_still_blocked(&w2, "the next writer waits for all three readers");
    assert_eq!(queue(&mut conn, "doc"), strings(&["w2"]));
    for owner in ["r1", "w", "r2"] {
        assert_eq!(release_shared(&mut conn, "doc", owner), 0);
    }
    granted_to(w2, "w2", 1);
}

#[test]
fn an_exclusive_holder_reenters_in_both_modes() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = exclusive(&mut conn, "doc", "w", LONG).unwrap();
    assert_eq!(
        exclusive(&mut conn, "doc", "w", LONG),
        Some((token, 2, b"w".to_vec()))
    );
    assert_eq!(
        shared(&mut conn, "doc", "w", LONG),
        Some((token, 1, b"w".to_vec()))
    );
    assert_eq!(
        shared(&mut conn, "doc", "w", LONG),
        Some((token, 2, b"w".to_vec()))
    );
    assert_eq!(
        take(
            &mut conn,
            "DLOCK.ACQUIRE",
            "doc",
            "w",
            LONG,
            &["SHARED", "LIMIT", "1"]
        ),
        Some((token, 3, b"w".to_vec()))
    );
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("w", 2, 3, token)]
    );
    assert_eq!(shared(&mut conn, "doc", "other", LONG), None);
    // RELEASE replies the holds left in both modes together.
    assert_eq!(release(&mut conn, "doc", "w"), 4);
    assert_eq!(release_shared(&mut conn, "doc", "w"), 3);
    assert_eq!(release(&mut conn, "doc", "w"), 2);
    assert_eq!(
        error_of(&mut conn, &["DLOCK.RELEASE", "doc", "w"]),
        "NOTOWNER the lock is not held by this owner (free, expired, or held by another owner)",
        "no exclusive hold left"
    );
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("w", 0, 2, token)]
    );
    assert_eq!(release_shared(&mut conn, "doc", "w"), 1);
    assert_eq!(release_shared(&mut conn, "doc", "w"), 0);
    assert!(!exists(&mut conn, "doc"));
}

#[test]
fn a_sole_reader_upgrades_at_once_with_a_new_token() {
    let server = Server::start();
    let mut conn = server.connect();
    let (read, _, _) = shared(&mut conn, "doc", "r", LONG).unwrap();
    let (write, holds, _) = exclusive(&mut conn, "doc", "r", LONG).expect("upgrade");
    assert_eq!(holds, 1);
    assert!(write > read, "an upgrade gets a new token");
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("r", 1, 1, write)]
    );
    assert_eq!(info_owner(&mut conn, "doc"), Some(b"r".to_vec()));
    assert_eq!(info_int(&mut conn, "doc", "token"), write);
    // Holding both, further acquires of either mode keep the token.
    assert_eq!(
        exclusive(&mut conn, "doc", "r", LONG),
        Some((write, 2, b"r".to_vec()))
    );
    assert_eq!(
        shared(&mut conn, "doc", "r", LONG),
        Some((write, 2, b"r".to_vec()))
    );
    assert_eq!(shared(&mut conn, "doc", "x", LONG), None);
    assert_eq!(release(&mut conn, "doc", "r"), 3);
    assert_eq!(release(&mut conn, "doc", "r"), 2);
    assert_eq!(int(&mut conn, &["DLOCK.RENEW", "doc", "r", "60000"]), write);
    // Back to shared only, alone again: the next upgrade is new again.
    let (again, _, _) = exclusive(&mut conn, "doc", "r", LONG).unwrap();
    assert!(again > write);
}

#[test]
fn an_upgrade_without_block_is_refused_while_others_read() {
    let server = Server::start();
    let mut conn = server.connect();
    let (r1, _, _) = shared(&mut conn, "doc", "r1", LONG).unwrap();
    let (r2, _, _) = shared(&mut conn, "doc", "r2", LONG).unwrap();
    let before = picture(&mut conn, "doc");
    assert_eq!(exclusive(&mut conn, "doc", "r1", LONG), None);
    assert_eq!(take(&mut conn, "DLOCK.FAIR", "doc", "r1", LONG, &[]), None);
    assert_eq!(
        picture(&mut conn, "doc"),
        before,
        "nothing changed (FAIR made no reservation either)"
    );
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("r1", 0, 1, r1), entry("r2", 0, 1, r2)]
    );
}

#[test]
fn a_blocked_upgrade_jumps_the_queue_and_keeps_its_shared_holds() {
    let server = Server::start();
    let mut conn = server.connect();
    let (r1, _, _) = shared(&mut conn, "doc", "r1", LONG).unwrap();
    shared(&mut conn, "doc", "r1", LONG).unwrap();
    let (r2, _, _) = shared(&mut conn, "doc", "r2", LONG).unwrap();
    let early_writer = block_acquire(&server, "doc", "w", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    let early_reader = block_shared(&server, "doc", "r3", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 2);

    let upgrade = block_acquire(&server, "doc", "r1", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 3);
    assert_eq!(
        queue(&mut conn, "doc"),
        strings(&["r1", "w", "r3"]),
        "the upgrader waits at the head"
    );
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("r1", 0, 2, r1), entry("r2", 0, 1, r2)],
        "keeping its shared holds"
    );
    assert_still_blocked(&upgrade, "r2 still reads");

    assert_eq!(release_shared(&mut conn, "doc", "r2"), 0);
    let (token, _) = granted_to(upgrade, "r1", 1);
    assert!(token > r2, "the upgrade gets a new token");
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("r1", 1, 2, token)]
    );
    assert_eq!(queue(&mut conn, "doc"), strings(&["w", "r3"]));
    assert_still_blocked(&early_writer, "the earlier waiter comes after the upgrader");

    // Back to shared: w still waits for r1's shared holds.
    assert_eq!(release(&mut conn, "doc", "r1"), 2);
    assert_still_blocked(&early_writer, "r1 still reads");
    assert!(!early_reader.is_finished(), "r3 waits behind w");
    assert_eq!(release_shared(&mut conn, "doc", "r1"), 1);
    assert_eq!(release_shared(&mut conn, "doc", "r1"), 0);
    let (w, _) = granted_to(early_writer, "w", 1);
    assert!(w > token);
    assert_eq!(release(&mut conn, "doc", "w"), 0);
    granted_to(early_reader, "r3", 1);
}

#[test]
fn a_blocked_upgrade_times_out_and_keeps_its_shared_hold() {
    let server = Server::start();
    let mut conn = server.connect();
    let (r1, _, _) = shared(&mut conn, "doc", "r1", LONG).unwrap();
    shared(&mut conn, "doc", "r2", LONG).unwrap();
    let upgrade = block_acquire(&server, "doc", "r1", LONG, 200);
    upgrade.refused();
    assert_eq!(waiting(&mut conn, "doc"), 0);
    assert_eq!(holders(&mut conn, "doc")[0].fixed(), entry("r1", 0, 1, r1));
    assert_eq!(release_shared(&mut conn, "doc", "r1"), 0);
}

#[test]
fn a_second_upgrader_gets_deadlock_and_nothing_changes() {
    let server = Server::start();
    let mut conn = server.connect();
    shared(&mut conn, "doc", "r1", LONG).unwrap();
    shared(&mut conn, "doc", "r2", LONG).unwrap();
    shared(&mut conn, "doc", "r3", LONG).unwrap();
    let writer = block_acquire(&server, "doc", "w", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    let upgrade = block_acquire(&server, "doc", "r1", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 2);
    let before = picture(&mut conn, "doc");
    let deadlocks = info_number(&mut conn, "dlock", "dlock_deadlocks");

    for args in [
        &["DLOCK.ACQUIRE", "doc", "r2", "60000", "BLOCK", "0"][..],
        &[
            "DLOCK.ACQUIRE",
            "doc",
            "r2",
            "60000",
            "BLOCK",
            "5000",
            "SESSION",
        ][..],
        &["DLOCK.FAIR", "doc", "r3", "60000", "BLOCK", "5000"][..],
    ] {
        let error = error_of(&mut conn, args);
        assert!(error.starts_with("DEADLOCK"), "{args:?}: {error}");
    }
    assert_eq!(picture(&mut conn, "doc"), before, "nothing changed");
    assert_eq!(
        info_number(&mut conn, "dlock", "dlock_deadlocks"),
        deadlocks + 3,
        "INFO dlock counts the DEADLOCK refusals"
    );
    // Without BLOCK the second upgrade is just refused.
    assert_eq!(exclusive(&mut conn, "doc", "r2", LONG), None);
    assert_eq!(picture(&mut conn, "doc"), before);

    assert_eq!(release_shared(&mut conn, "doc", "r2"), 0);
    assert_eq!(release_shared(&mut conn, "doc", "r3"), 0);
    let (token, _) = granted_to(upgrade, "r1", 1);
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("r1", 1, 1, token)]
    );
    // Once the upgrade is through, nobody else is upgrading: r1 is alone.
    assert_eq!(release(&mut conn, "doc", "r1"), 1);
    assert_eq!(release_shared(&mut conn, "doc", "r1"), 0);
    granted_to(writer, "w", 1);
}

// ---------------------------------------------------------------------------
// Re-entry, tokens and leases.
// ---------------------------------------------------------------------------

#[test]
fn a_reader_reenters_while_a_writer_waits_even_with_block() {
    let server = Server::start();
    let mut conn = server.connect();
    let (r, _, _) = shared(&mut conn, "doc", "r", LONG).unwrap();
    let writer = block_acquire(&server, "doc", "w", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    assert_eq!(
        shared(&mut conn, "doc", "r", LONG),
        Some((r, 2, b"r".to_vec()))
    );
    assert_eq!(
        take(&mut conn, "DLOCK.FAIR", "doc", "r", LONG, &["SHARED"]),
        Some((r, 3, b"r".to_vec()))
    );
    let started = Instant::now();
    assert_eq!(
        take(
            &mut conn,
            "DLOCK.ACQUIRE",
            "doc",
            "r",
            LONG,
            &["BLOCK", "5000", "SHARED", "LIMIT", "1"]
        ),
        Some((r, 4, b"r".to_vec()))
    );
    assert!(started.elapsed() < PROMPTLY, "a re-entry never queues");
    assert_eq!(waiting(&mut conn, "doc"), 1);
    assert_eq!(holder_counts(&mut conn, "doc"), vec![entry("r", 0, 4, r)]);
    for left in (0..4).rev() {
        assert_eq!(release_shared(&mut conn, "doc", "r"), left);
    }
    granted_to(writer, "w", 1);
}

#[test]
fn tokens_are_new_only_when_a_hold_or_an_exclusive_hold_begins() {
    let server = Server::start();
    let mut conn = server.connect();
    let (a, _, _) = shared(&mut conn, "k1", "a", LONG).unwrap();
    let (b, _, _) = shared(&mut conn, "k2", "b", LONG).unwrap();
    let (c, _, _) = exclusive(&mut conn, "k1x", "c", LONG).unwrap();
    assert!(a < b && b < c, "strictly increasing across keys");
    assert_eq!(shared(&mut conn, "k1", "a", LONG).unwrap().0, a);
    assert_eq!(shared(&mut conn, "k1x", "c", LONG).unwrap().0, c);
    assert_eq!(release(&mut conn, "k1x", "c"), 1);
    assert_eq!(
        shared(&mut conn, "k1x", "c", LONG).unwrap().0,
        c,
        "still holding"
    );
    let (d, _, _) = shared(&mut conn, "k1", "d", LONG).unwrap();
    assert!(d > c);
    assert_eq!(release_shared(&mut conn, "k1", "a"), 1);
    assert_eq!(release_shared(&mut conn, "k1", "a"), 0);
    let (a2, _, _) = shared(&mut conn, "k1", "a", LONG).unwrap();
    assert!(a2 > d, "a new hold after holding nothing");
    assert_eq!(int(&mut conn, &["DLOCK.RENEW", "k1", "a", "1000"]), a2);
    assert_eq!(int(&mut conn, &["DLOCK.RENEW", "k1", "d", "1000"]), d);
    let (up, _, _) = exclusive(&mut conn, "k1x", "c", LONG).unwrap();
    assert!(up > a2, "an upgrade from shared only is a new token");
    let highest: i64 = info_number(&mut conn, "dlock", "dlock_last_token");
    assert_eq!(highest, up);
}

#[test]
fn each_reader_has_its_own_lease() {
    let server = Server::start();
    let mut conn = server.connect();
    let (brief, _, _) = shared(&mut conn, "doc", "brief", 5_000).unwrap();
    let (steady, _, _) = shared(&mut conn, "doc", "steady", 2_000).unwrap();
    // RENEW works per holder and replies its token.
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "doc", "steady", "60000"]),
        steady
    );
    // A grant of either mode resets the lease too (here, shortens it).
    assert_eq!(shared(&mut conn, "doc", "brief", 300).unwrap().0, brief);
    let list = holders(&mut conn, "doc");
    assert!(list[0].pttl <= 300 && list[1].pttl > 50_000, "{list:?}");
    let writer = block_acquire(&server, "doc", "w", LONG, 20_000);

    wait_until("the brief reader's lease to end", || {
        holders(&mut conn, "doc").iter().all(|h| h.owner != "brief")
    });
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("steady", 0, 1, steady)]
    );
    assert_eq!(shared_owners(&mut conn, "doc"), 1);
    assert!(
        !writer.is_finished(),
        "the writer waits for the other reader"
    );
    for args in [
        &["DLOCK.RELEASE", "doc", "brief", "SHARED"][..],
        &["DLOCK.RENEW", "doc", "brief", "1000"][..],
    ] {
        assert!(
            error_of(&mut conn, args).starts_with("NOTOWNER"),
            "{args:?}"
        );
    }
    assert_eq!(release_shared(&mut conn, "doc", "steady"), 0);
    granted_to(writer, "w", 1);

    // The lease of an owner holding both modes ends both holds.
    let (t, _, _) = exclusive(&mut conn, "both", "o", 300).unwrap();
    shared(&mut conn, "both", "o", 300).unwrap();
    let reader = block_shared(&server, "both", "r", LONG, 20_000);
    wait_for_waiting(&mut conn, "both", 1);
    let (r, _) = granted_to(reader, "r", 1);
    assert!(r > t);
    assert_eq!(holder_counts(&mut conn, "both"), vec![entry("r", 0, 1, r)]);
}

#[test]
fn release_shared_replies_and_notowner_cases() {
    let server = Server::start();
    let mut conn = server.connect();
    let notowner =
        "NOTOWNER the lock is not held by this owner (free, expired, or held by another owner)";
    assert_eq!(
        error_of(&mut conn, &["DLOCK.RELEASE", "none", "a", "SHARED"]),
        notowner
    );
    exclusive(&mut conn, "x", "w", LONG).unwrap();
    shared(&mut conn, "s", "r", LONG).unwrap();
    shared(&mut conn, "s", "r", LONG).unwrap();
    let before = (picture(&mut conn, "x"), picture(&mut conn, "s"));
    for args in [
        &["DLOCK.RELEASE", "x", "w", "SHARED"][..],
        &["DLOCK.RELEASE", "s", "r"][..],
        &["DLOCK.RELEASE", "s", "nobody", "SHARED"][..],
        &["DLOCK.RELEASE", "x", "r", "SHARED"][..],
    ] {
        assert_eq!(error_of(&mut conn, args), notowner, "{args:?}");
    }
    for args in [
        &["DLOCK.RELEASE", "s", "r", "EXCLUSIVE"][..],
        &["DLOCK.RELEASE", "s", "r", "SHARED", "SHARED"][..],
        &["DLOCK.RELEASE", "s", "r", "LIMIT"][..],
    ] {
        let error = error_of(&mut conn, args);
        assert!(error.starts_with("ERR"), "{args:?}: {error}");
    }
    assert_eq!((picture(&mut conn, "x"), picture(&mut conn, "s")), before);
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "s", "r", "shared"]), 1);
    cmd(&mut conn, &["SET", "str", "v"]).unwrap();
    assert!(error_of(&mut conn, &["DLOCK.RELEASE", "str", "r", "SHARED"]).starts_with("WRONGTYPE"));
}

// ---------------------------------------------------------------------------
// DLOCK.INFO.
// ---------------------------------------------------------------------------

fn names_and_values(value: Value) -> Vec<(String, Value)> {
    match value {
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| match &pair[0] {
                Value::BulkString(name) => (str_of(name), pair[1].clone()),
                other => panic!("field name {other:?}"),
            })
            .collect(),
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(name, value)| match name {
                Value::BulkString(name) => (str_of(&name), value),
                Value::SimpleString(name) => (name, value),
                other => panic!("field name {other:?}"),
            })
            .collect(),
        other => panic!("not an INFO reply: {other:?}"),
    }
}

#[test]
fn info_lists_shared_and_holders_in_resp2_and_resp3() {
    let server = Server::start();
    let mut conn = server.connect();
    let (w, _, _) = exclusive(&mut conn, "doc", "w", LONG).unwrap();
    shared(&mut conn, "doc", "w", 30_000).unwrap();
    shared(&mut conn, "doc", "w", 30_000).unwrap();
    let reader = block_shared(&server, "doc", "r", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    let resp2 = cmd(&mut conn, &["DLOCK.INFO", "doc"]).unwrap();
    let Value::Array(ref flat) = resp2 else {
        panic!("RESP2 INFO is a flat array: {resp2:?}");
    };
    assert_eq!(flat.len(), 16, "eight fields: {resp2:?}");
    let fields = names_and_values(resp2);
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["owner", "holds", "token", "pttl", "waiting", "queue", "shared", "holders"]
    );
    assert_eq!(fields[0].1, Value::BulkString(b"w".to_vec()));
    assert_eq!(fields[1].1, Value::Int(1));
    assert_eq!(fields[2].1, Value::Int(w));
    assert_eq!(fields[4].1, Value::Int(1));
    assert_eq!(fields[6].1, Value::Int(1));
    let list = parse_holders(&fields[7].1);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].fixed(), entry("w", 1, 2, w));
    assert!(
        list[0].pttl > 25_000 && list[0].pttl <= 30_000,
        "one lease per owner, reset by the last grant"
    );

    let mut resp3 = server.connect_resp3();
    let map = cmd(&mut resp3, &["DLOCK.INFO", "doc"]).unwrap();
    assert!(matches!(map, Value::Map(_)), "RESP3 INFO is a map: {map:?}");
    let fields3 = names_and_values(map);
    let names3: Vec<&str> = fields3.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names3, names);
    assert_eq!(parse_holders(&fields3[7].1)[0].fixed(), entry("w", 1, 2, w));
    assert_eq!(fields3[6].1, Value::Int(1));

    // Holders are listed in the order their holds began.
    assert_eq!(release(&mut conn, "doc", "w"), 2);
    let (r, _) = granted_to(reader, "r", 1);
    let (x, _, _) = shared(&mut conn, "doc", "x", LONG).unwrap();
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![
            entry("w", 0, 2, w),
            entry("r", 0, 1, r),
            entry("x", 0, 1, x)
        ]
    );
    release_shared(&mut conn, "doc", "w");
    release_shared(&mut conn, "doc", "w");
    let (w2, _, _) = shared(&mut conn, "doc", "w", LONG).unwrap();
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![
            entry("r", 0, 1, r),
            entry("x", 0, 1, x),
            entry("w", 0, 1, w2)
        ]
    );
    let fields3 = names_and_values(cmd(&mut resp3, &["DLOCK.INFO", "doc"]).unwrap());
    assert_eq!(fields3[0].1, Value::Nil);
    assert_eq!(fields3[3].1, Value::Int(-1));
    assert_eq!(fields3[6].1, Value::Int(3));
    assert_eq!(parse_holders(&fields3[7].1).len(), 3);

    // An exclusive lock as before, with one holders entry.
    let (t, _, _) = exclusive(&mut conn, "plain", "p", LONG).unwrap();
    assert_eq!(shared_owners(&mut conn, "plain"), 0);
    assert_eq!(holder_counts(&mut conn, "plain"), vec![entry("p", 1, 0, t)]);
    // A lock kept only by a reservation has no holders.
    config_set(&mut conn, "dlock.fair-reservation-ms", "60000");
    assert_eq!(
        take(&mut conn, "DLOCK.FAIR", "plain", "f", LONG, &["SHARED"]),
        None
    );
    release(&mut conn, "plain", "p");
    assert_eq!(holder_counts(&mut conn, "plain"), vec![]);
    assert_eq!(shared_owners(&mut conn, "plain"), 0);
    assert_eq!(queue(&mut conn, "plain"), strings(&["f"]));
}

// ---------------------------------------------------------------------------
// FAIR SHARED.
// ---------------------------------------------------------------------------

#[test]
fn fair_shared_reservations_keep_their_place() {
    let server = Server::start();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.fair-reservation-ms", "60000");
    let (w, _, _) = exclusive(&mut conn, "doc", "w", LONG).unwrap();
    let fair = |conn: &mut Connection, owner: &str, options: &[&str]| {
        take(conn, "DLOCK.FAIR", "doc", owner, LONG, options)
    };
    assert_eq!(fair(&mut conn, "f1", &["SHARED"]), None);
    assert_eq!(fair(&mut conn, "f2", &["SHARED", "LIMIT", "5"]), None);
    let blocked = block_shared(&server, "doc", "b", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 3);
    assert_eq!(
        fair(&mut conn, "f1", &["SHARED"]),
        None,
        "refreshed in place"
    );
    assert_eq!(queue(&mut conn, "doc"), strings(&["f1", "f2", "b"]));

    assert_eq!(release(&mut conn, "doc", "w"), 0);
    // The reservation at the head keeps the free lock for its owner.
    assert_eq!(shared(&mut conn, "doc", "x", LONG), None);
    assert_eq!(fair(&mut conn, "f2", &["SHARED"]), None);
    assert_still_blocked(&blocked, "b waits behind two reservations");
    let (f1, holds, _) = fair(&mut conn, "f1", &["SHARED"]).expect("the head's owner claims it");
    assert!(f1 > w && holds == 1);
    // f2 now heads and is compatible: it claims its place as a reader too.
    let (f2, _, _) = fair(&mut conn, "f2", &["SHARED", "LIMIT", "5"]).unwrap();
    // With the reservations gone, the blocked reader heads and joins them.
    let (b, _) = granted_to(blocked, "b", 1);
    assert!(f1 < f2 && f2 < b);
    assert_eq!(shared_owners(&mut conn, "doc"), 3);
    assert_eq!(waiting(&mut conn, "doc"), 0);

    // A FAIR SHARED call that fits is granted at once.
    assert!(fair(&mut conn, "f3", &["SHARED"]).is_some());
    // A FAIR SHARED reservation behind a waiting writer, claimed in either
    // mode by its owner once it heads a free lock.
    let writer = block_acquire(&server, "doc", "w2", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    assert_eq!(fair(&mut conn, "f4", &["SHARED"]), None);
    assert_eq!(queue(&mut conn, "doc"), strings(&["w2", "f4"]));
    for owner in ["f1", "f2", "b", "f3"] {
        assert_eq!(release_shared(&mut conn, "doc", owner), 0);
    }
    granted_to(writer, "w2", 1);
    assert_eq!(release(&mut conn, "doc", "w2"), 0);
    assert_eq!(shared(&mut conn, "doc", "y", LONG), None, "kept for f4");
    let (f4, holds, _) = exclusive(&mut conn, "doc", "f4", LONG).expect("f4 claims, exclusively");
    assert_eq!(holds, 1);
    assert_eq!(holder_counts(&mut conn, "doc"), vec![entry("f4", 1, 0, f4)]);
}

#[test]
fn an_expired_reservation_lets_the_readers_behind_it_in() {
    let server = Server::start();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.fair-reservation-ms", "1500");
    exclusive(&mut conn, "doc", "w", LONG).unwrap();
    assert_eq!(
        take(&mut conn, "DLOCK.FAIR", "doc", "f", LONG, &["SHARED"]),
        None
    );
    let r1 = block_shared(&server, "doc", "r1", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 2);
    let r2 = block_shared(&server, "doc", "r2", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 3);
    assert_eq!(release(&mut conn, "doc", "w"), 0);
    assert_eq!(queue(&mut conn, "doc"), strings(&["f", "r1", "r2"]));
    assert_still_blocked(&r1, "r1 waits behind f's reservation");
    granted_to(r1, "r1", 1);
    granted_to(r2, "r2", 1);
    assert_eq!(shared_owners(&mut conn, "doc"), 2);
}

// ---------------------------------------------------------------------------
// Arguments and errors.
// ---------------------------------------------------------------------------

#[test]
fn options_come_in_any_order_and_any_case() {
    let server = Server::start();
    let mut conn = server.connect();
    for (i, options) in [
        &["SHARED"][..],
        &["SHARED", "LIMIT", "10"][..],
        &["LIMIT", "10", "SHARED"][..],
        &["limit", "10", "shared"][..],
        &["BLOCK", "100", "LIMIT", "10", "SESSION", "SHARED"][..],
        &["SESSION", "SHARED", "BLOCK", "100"][..],
        &["LIMIT", "4294967295", "SHARED"][..],
    ]
    .iter()
    .enumerate()
    {
        for command in ["DLOCK.ACQUIRE", "DLOCK.FAIR"] {
            let owner = format!("{command}-{i}");
            let (_, holds, _) = take(&mut conn, command, "doc", &owner, LONG, options)
                .unwrap_or_else(|| panic!("{options:?} granted"));
            assert_eq!(holds, 1);
        }
    }
    assert_eq!(shared_owners(&mut conn, "doc"), 14);
    // A generated owner works in shared mode too.
    let (_, _, owner) = shared(&mut conn, "doc", "*", LONG).unwrap();
    assert_eq!(owner.len(), 36);
    assert_eq!(shared_owners(&mut conn, "doc"), 15);
}

#[test]
fn every_new_error_changes_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    shared(&mut conn, "doc", "r", LONG).unwrap();
    let writer = block_acquire(&server, "doc", "w", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    let before = picture(&mut conn, "doc");
    let counters: String = redis::cmd("INFO").arg("dlock").query(&mut conn).unwrap();
    let without_timing = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with("dlock_blocked_clients"))
            .map(str::to_string)
            .collect()
    };

    let syntax = "ERR syntax error";
    let cases: Vec<(Vec<&str>, Option<&str>)> = vec![
        (vec!["LIMIT", "2"], Some(syntax)),
        (vec!["LIMIT", "2", "BLOCK", "100"], Some(syntax)),
        (vec!["SESSION", "LIMIT", "5"], Some(syntax)),
        (vec!["SHARED", "SHARED"], Some(syntax)),
        (vec!["SHARED", "LIMIT", "2", "LIMIT", "3"], Some(syntax)),
        (vec!["LIMIT", "2", "SHARED", "LIMIT", "2"], Some(syntax)),
        (vec!["SHARED", "LIMIT"], Some(syntax)),
        (vec!["SHARED", "EXCLUSIVE"], Some(syntax)),
        (vec!["SHARED", "LIMIT", "0"], None),
        (vec!["SHARED", "LIMIT", "-1"], None),
        (vec!["SHARED", "LIMIT", "4294967296"], None),
        (vec!["SHARED", "LIMIT", "99999999999999999999999"], None),
        (vec!["SHARED", "LIMIT", "abc"], None),
        (vec!["SHARED", "LIMIT", "1.5"], None),
        (vec!["SHARED", "LIMIT", "02"], None),
        (vec!["SHARED", "LIMIT", "+2"], None),
        (vec!["SHARED", "LIMIT", ""], None),
        (vec!["LIMIT", "0", "SHARED"], None),
    ];
    for command in ["DLOCK.ACQUIRE", "DLOCK.FAIR"] {
        for owner in ["r", "new"] {
            for key in ["doc", "fresh"] {
                for (options, expected) in &cases {
                    let mut args = vec![command, key, owner, "60000"];
                    args.extend_from_slice(options);
                    let error = error_of(&mut conn, &args);
                    match expected {
                        Some(text) => assert_eq!(&error, text, "{args:?}"),
                        None => assert!(
                            error.starts_with("ERR") && error.to_lowercase().contains("limit"),
                            "{args:?}: the error names the limit: {error}"
                        ),
                    }
                }
            }
        }
    }
    assert_eq!(picture(&mut conn, "doc"), before);
    assert!(!exists(&mut conn, "fresh"));
    let after: String = redis::cmd("INFO").arg("dlock").query(&mut conn).unwrap();
    assert_eq!(
        without_timing(&after),
        without_timing(&counters),
        "no counter moved"
    );
    assert!(!writer.is_finished());
    assert_eq!(release_shared(&mut conn, "doc", "r"), 0);
    granted_to(writer, "w", 1);
}

#[test]
fn block_in_a_transaction_makes_one_shared_attempt() {
    let server = Server::start();
    let mut conn = server.connect();
    exclusive(&mut conn, "doc", "w", LONG).unwrap();
    shared(&mut conn, "free", "a", LONG).unwrap();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg(&["doc", "r", "60000", "SHARED", "BLOCK", "0"])
        .cmd("DLOCK.ACQUIRE")
        .arg(&["free", "b", "60000", "BLOCK", "0", "SHARED", "LIMIT", "2"])
        .query(&mut conn)
        .unwrap();
    assert_eq!(replies[0], Value::Nil);
    assert!(grant(replies[1].clone()).is_some());
    assert_eq!(waiting(&mut conn, "doc"), 0);
    let script =
        "return redis.call('DLOCK.ACQUIRE', KEYS[1], ARGV[1], 60000, 'SHARED', 'BLOCK', 0)";
    let reply = cmd(&mut conn, &["EVAL", script, "1", "doc", "s"]).unwrap();
    assert_eq!(reply, Value::Nil);
    let reply = cmd(&mut conn, &["EVAL", script, "1", "free", "s"]).unwrap();
    assert!(grant(reply).is_some());
    assert_eq!(shared_owners(&mut conn, "free"), 3);
}

// ---------------------------------------------------------------------------
// Keyspace events.
// ---------------------------------------------------------------------------

#[test]
fn keyspace_events_name_the_shared_mode() {
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
    pubsub.psubscribe("__keyspace@0__:doc").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    let mut conn = server.connect();
    shared(&mut conn, "doc", "r", LONG).unwrap();
    shared(&mut conn, "doc", "r", LONG).unwrap();
    let writer = block_acquire(&server, "doc", "w", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    assert_eq!(release_shared(&mut conn, "doc", "r"), 1);
    assert_eq!(release_shared(&mut conn, "doc", "r"), 0);
    granted_to(writer, "w", 1);
    let reader = block_shared(&server, "doc", "x", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    shared(&mut conn, "doc", "w", LONG).unwrap();
    assert_eq!(release(&mut conn, "doc", "w"), 1);
    granted_to(reader, "x", 1);

    let expected = [
        "dlock.acquire.shared",
        "dlock.reenter.shared",
        "dlock.release.shared",
        "dlock.release.shared",
        "dlock.handoff",
        "dlock.reenter.shared",
        "dlock.release",
        "dlock.handoff.shared",
    ];
    let mut events = Vec::new();
    while events.len() < expected.len() {
        let message = pubsub.get_message().expect("a keyspace event");
        events.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(events, expected);
}

// ---------------------------------------------------------------------------
// Every change of the lock serves the queue: lease expiry, SESSION close,
// FLUSHALL.
// ---------------------------------------------------------------------------

/// Queues readers r1, r2 and then writer w2 behind the current holder of
/// `key`, and returns them.
fn queue_two_readers_and_a_writer(
    server: &Server,
    conn: &mut Connection,
    key: &str,
) -> (Pending, Pending, Pending) {
    let r1 = block_shared(server, key, "r1", LONG, 20_000);
    wait_for_waiting(conn, key, 1);
    let r2 = block_shared(server, key, "r2", LONG, 20_000);
    wait_for_waiting(conn, key, 2);
    let w2 = block_acquire(server, key, "w2", LONG, 20_000);
    wait_for_waiting(conn, key, 3);
    (r1, r2, w2)
}

#[test]
fn a_writer_ending_any_way_lets_a_batch_of_readers_in() {
    let server = Server::start();
    let mut conn = server.connect();

    // Its lease runs out.
    exclusive(&mut conn, "lease", "w", 1_000).unwrap();
    let (r1, r2, w2) = queue_two_readers_and_a_writer(&server, &mut conn, "lease");
    granted_to(r1, "r1", 1);
    granted_to(r2, "r2", 1);
    assert_eq!(queue(&mut conn, "lease"), strings(&["w2"]));
    assert_still_blocked(&w2, "the writer behind the batch waits");
    assert!(error_of(&mut conn, &["DLOCK.RELEASE", "lease", "w"]).starts_with("NOTOWNER"));
    give_up(&mut conn, w2);

    // Its SESSION connection is killed.
    let mut session = server.connect();
    let id = client_id_of(&mut session);
    take(
        &mut session,
        "DLOCK.ACQUIRE",
        "sess",
        "w",
        LONG,
        &["SESSION"],
    )
    .unwrap();
    let (r1, r2, w2b) = queue_two_readers_and_a_writer(&server, &mut conn, "sess");
    int(&mut conn, &["CLIENT", "KILL", "ID", &id.to_string()]);
    granted_to(r1, "r1", 1);
    granted_to(r2, "r2", 1);
    assert_still_blocked(&w2b, "the writer behind the batch waits");
    give_up(&mut conn, w2b);

    // FLUSHALL: a forced release, the waiters re-queued in order.
    exclusive(&mut conn, "flush", "w", LONG).unwrap();
    let (r1, r2, w2c) = queue_two_readers_and_a_writer(&server, &mut conn, "flush");
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    granted_to(r1, "r1", 1);
    granted_to(r2, "r2", 1);
    assert_still_blocked(&w2c, "the writer behind the batch waits");
    assert_eq!(shared_owners(&mut conn, "flush"), 2);
    give_up(&mut conn, w2c);
}

/// Ends a blocked command by killing its connection.
fn give_up(conn: &mut Connection, pending: Pending) {
    int(conn, &["CLIENT", "KILL", "ID", &pending.id.to_string()]);
    assert!(pending.join().0.is_err(), "the killed waiter got a reply");
}

#[test]
fn a_session_tie_covers_both_modes_of_the_owner() {
    let server = Server::start();
    let mut conn = server.connect();
    let mut session = server.connect();
    let id = client_id_of(&mut session);
    let (read, _, _) = take(
        &mut session,
        "DLOCK.ACQUIRE",
        "doc",
        "s",
        LONG,
        &["SHARED", "SESSION"],
    )
    .unwrap();
    // An upgrade (a new token) and a re-entry, without SESSION, from the tied
    // connection and from another one.
    let (write, _, _) = exclusive(&mut session, "doc", "s", LONG).unwrap();
    assert!(write > read);
    shared(&mut conn, "doc", "s", LONG).unwrap();
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("s", 1, 2, write)]
    );
    let reader = block_shared(&server, "doc", "r", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    int(&mut conn, &["CLIENT", "KILL", "ID", &id.to_string()]);
    let (r, _) = granted_to(reader, "r", 1);
    assert_eq!(holder_counts(&mut conn, "doc"), vec![entry("r", 0, 1, r)]);
    assert!(error_of(&mut conn, &["DLOCK.RELEASE", "doc", "s", "SHARED"]).starts_with("NOTOWNER"));
}

#[test]
fn the_last_readers_lease_ending_hands_the_lock_on() {
    let server = Server::start();
    let mut conn = server.connect();
    // To a waiting writer, once both short leases have ended.
    shared(&mut conn, "doc", "r1", 600).unwrap();
    shared(&mut conn, "doc", "r2", 300).unwrap();
    let deadline = now_ms() + 600;
    let writer = block_acquire(&server, "doc", "w", LONG, 20_000);
    let (_, at) = granted_to(writer, "w", 1);
    let granted_ms = now_ms() - at.elapsed().as_millis() as i64;
    assert!(
        granted_ms >= deadline - 50,
        "granted {} ms before the last lease ended",
        deadline - granted_ms
    );
    assert!(granted_ms < deadline + 1_000);
    assert_eq!(holders(&mut conn, "doc").len(), 1);

    // To a waiting upgrade, once the other reader's lease has ended.
    let (r1, _, _) = shared(&mut conn, "up", "r1", LONG).unwrap();
    shared(&mut conn, "up", "r2", 300).unwrap();
    let upgrade = block_acquire(&server, "up", "r1", LONG, 20_000);
    let (token, _) = granted_to(upgrade, "r1", 1);
    assert!(token > r1);
    assert_eq!(
        holder_counts(&mut conn, "up"),
        vec![entry("r1", 1, 1, token)]
    );
}

#[test]
fn an_upgrader_that_leaves_frees_the_upgrade_place() {
    let server = Server::start();
    let mut conn = server.connect();
    let (r1, _, _) = shared(&mut conn, "doc", "r1", LONG).unwrap();
    shared(&mut conn, "doc", "r2", LONG).unwrap();
    shared(&mut conn, "doc", "r3", LONG).unwrap();
    // Killed while waiting: it keeps its shared hold, and another reader may
    // now wait to upgrade.
    let first = block_acquire(&server, "doc", "r1", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    give_up(&mut conn, first);
    wait_for_waiting(&mut conn, "doc", 0);
    assert_eq!(holders(&mut conn, "doc")[0].fixed(), entry("r1", 0, 1, r1));
    // Timed out: the same.
    block_acquire(&server, "doc", "r2", LONG, 100).refused();
    let third = block_acquire(&server, "doc", "r3", LONG, 20_000);
    wait_for_waiting(&mut conn, "doc", 1);
    assert_eq!(queue(&mut conn, "doc"), strings(&["r3"]));
    assert!(error_of(
        &mut conn,
        &["DLOCK.ACQUIRE", "doc", "r1", "60000", "BLOCK", "100"]
    )
    .starts_with("DEADLOCK"));
    assert_eq!(release_shared(&mut conn, "doc", "r1"), 0);
    assert_eq!(release_shared(&mut conn, "doc", "r2"), 0);
    let (token, _) = granted_to(third, "r3", 1);
    assert_eq!(
        holder_counts(&mut conn, "doc"),
        vec![entry("r3", 1, 1, token)]
    );
}
