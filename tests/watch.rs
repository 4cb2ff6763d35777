//! `DLOCK.WATCH key token timeout`: waiting for a change of a lock's newest
//! token without taking the lock (leader election). Replies at once when
//! the token differs; otherwise blocks until a grant (at once, by hand-off,
//! batch or multi-key), a release, a SESSION close, a lease's end, DEL,
//! FLUSHALL, RENAME, MOVE, SWAPDB, RESTORE, eviction or a replicated change,
//! and answers every watcher of the key together; a re-entry, a RENEW or an
//! older holder's change wakes nobody; null at its timeout and on CLIENT
//! UNBLOCK; never blocks inside MULTI or scripts; works on replicas and in a
//! grace window; WRONGTYPE on other types; and every error changes nothing.

use crate::common;

use common::*;
use std::time::Duration;

/// A WATCH reply: `(newest token, owner, pttl)`, None for null.
type State = Option<(i64, Option<Vec<u8>>, i64)>;

fn state(value: Value) -> State {
    match value {
        Value::Nil => None,
        Value::Array(items) => match items.as_slice() {
            [Value::Int(token), Value::BulkString(owner), Value::Int(pttl)] => {
                Some((*token, Some(owner.clone()), *pttl))
            }
            [Value::Int(token), Value::Nil, Value::Int(pttl)] => Some((*token, None, *pttl)),
            other => panic!("not a WATCH reply: {other:?}"),
        },
        other => panic!("not a WATCH reply: {other:?}"),
    }
}

/// `DLOCK.WATCH key token timeout` on `conn`.
fn watch(conn: &mut Connection, key: &str, token: i64, timeout: u64) -> State {
    let reply = cmd(
        conn,
        &["DLOCK.WATCH", key, &token.to_string(), &timeout.to_string()],
    )
    .expect("DLOCK.WATCH");
    state(reply)
}

/// `DLOCK.WATCH key token 0` on its own connection.
fn spawn_watch(server: &Server, key: &str, token: i64) -> Pending {
    spawn_command(server, &["DLOCK.WATCH", key, &token.to_string(), "0"])
}

/// The reply of a spawned WATCH.
fn answer(pending: Pending) -> State {
    let (reply, _) = pending.join();
    state(reply.expect("the blocked WATCH failed"))
}

fn watchers(conn: &mut Connection) -> i64 {
    info_number(conn, "dlock", "dlock_watchers")
}

fn wakeups(conn: &mut Connection) -> i64 {
    info_number(conn, "dlock", "dlock_watch_wakeups")
}

/// Polls `INFO dlock` until `n` clients are blocked in WATCH.
fn wait_for_watchers(conn: &mut Connection, n: i64) {
    wait_until(&format!("{n} watchers"), || watchers(conn) == n);
}

/// `[token, owner, pttl]` of a live hold: the token and owner as given,
/// the pttl within the lease.
fn assert_held(got: State, token: i64, owner: &str, ttl: i64) {
    let (got_token, got_owner, pttl) = got.expect("a state, not null");
    assert_eq!(got_token, token);
    assert_eq!(got_owner.as_deref(), Some(owner.as_bytes()));
    assert!(pttl > 0 && pttl <= ttl, "pttl {pttl} within {ttl}");
}

const FREE: State = Some((0, None, -1));

#[test]
fn replies_at_once_when_the_token_differs_and_null_at_the_timeout() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(watch(&mut conn, "job", 7, 0), FREE, "a missing key");
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    assert_held(watch(&mut conn, "job", 0, 0), token, "alice", 60_000);
    assert_held(
        watch(&mut conn, "job", token - 1, 0),
        token,
        "alice",
        60_000,
    );
    assert_eq!(wakeups(&mut conn), 0, "immediate replies are no wake-ups");

    // The same token: it blocks until the timeout, then null.
    let pending = spawn_command(&server, &["DLOCK.WATCH", "job", &token.to_string(), "150"]);
    let sent = pending.sent;
    let (reply, at) = pending.join();
    assert_eq!(state(reply.unwrap()), None);
    assert!(at - sent >= Duration::from_millis(150), "{:?}", at - sent);
    assert_eq!(watchers(&mut conn), 0);
    assert_eq!(watch(&mut conn, "free", 0, 50), None, "free and known free");

    // A queue alone, or a reservation, is no holder.
    assert!(fair(&mut conn, "job", "bob", 60_000).is_none());
    assert_eq!(release(&mut conn, "job", "alice"), 0);
    assert_eq!(
        watch(&mut conn, "job", token, 0),
        FREE,
        "only a reservation"
    );
}

#[test]
fn grant_release_expiry_and_handoff_wake_it_but_reentry_and_renew_do_not() {
    let server = Server::start();
    let mut conn = server.connect();
    // A grant on a missing key.
    let first = spawn_watch(&server, "job", 0);
    wait_for_watchers(&mut conn, 1);
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    assert_held(answer(first), token, "alice", 60_000);

    // Re-entry and RENEW leave the newest token: the watcher keeps waiting.
    let second = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(acquire(&mut conn, "job", "alice", 60_000).unwrap().0, token);
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "job", "alice", "60000"]),
        token
    );
    assert_eq!(release(&mut conn, "job", "alice"), 1, "one re-entry undone");
    assert_eq!(watchers(&mut conn), 1);
    assert!(!second.is_finished());
    // The release of the last hold.
    assert_eq!(release(&mut conn, "job", "alice"), 0);
    assert_eq!(answer(second), FREE);

    // A server-side hand-off to a blocked waiter.
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let waiter = block_acquire(&server, "job", "bob", 60_000, 0);
    wait_for_waiting(&mut conn, "job", 1);
    let third = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(release(&mut conn, "job", "alice"), 0);
    let ((bob_token, _, _), _) = waiter.granted();
    assert!(bob_token > token);
    assert_held(answer(third), bob_token, "bob", 60_000);

    assert_eq!(wakeups(&mut conn), 3);
}

#[test]
fn the_end_of_a_lease_wakes_it_with_no_command_touching_the_key() {
    // Without Redis's active expiry only the module's timer ends a lease.
    let (server, mut conn) = server_without_active_expiry();
    let (token, _, _) = acquire(&mut conn, "short", "carol", 1_000).unwrap();
    let watcher = spawn_watch(&server, "short", token);
    assert_eq!(answer(watcher), FREE);
    assert_eq!(wakeups(&mut conn), 1);
    // The newest of two shared holds ends first: the older one is the newest now.
    let read = |conn: &mut Connection, owner: &str, ttl: &str| {
        grant(cmd(conn, &["DLOCK.ACQUIRE", "doc", owner, ttl, "SHARED"]).unwrap()).unwrap()
    };
    let (older, _, _) = read(&mut conn, "long", "60000");
    let (newer, _, _) = read(&mut conn, "brief", "300");
    let watcher = spawn_watch(&server, "doc", newer);
    assert_held(answer(watcher), older, "long", 60_000);
    // A RENEW moves the end of the newest lease: the watcher waits for the
    // new end, not the first.
    let (token, _, _) = acquire(&mut conn, "renewed", "dave", 1_000).unwrap();
    let first_end = pexpiretime(&mut conn, "renewed");
    let watcher = spawn_watch(&server, "renewed", token);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "renewed", "dave", "2000"]),
        token
    );
    wait_until("the first lease's end has passed", || {
        now_ms() > first_end + 100
    });
    assert_eq!(watchers(&mut conn), 1, "renewed: still the same holder");
    assert!(!watcher.is_finished());
    assert_eq!(answer(watcher), FREE);
}

#[test]
fn a_change_among_older_holders_does_not_wake_it() {
    let server = Server::start();
    let mut conn = server.connect();
    let read = |conn: &mut Connection, owner: &str| {
        grant(cmd(conn, &["DLOCK.ACQUIRE", "doc", owner, "60000", "SHARED"]).unwrap()).unwrap()
    };
    let (older, _, _) = read(&mut conn, "r1");
    let (newest, _, _) = read(&mut conn, "r2");
    assert!(newest > older);
    assert_held(watch(&mut conn, "doc", older, 0), newest, "r2", 60_000);
    let watcher = spawn_watch(&server, "doc", newest);
    wait_for_watchers(&mut conn, 1);
    read(&mut conn, "r1");
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "doc", "r1", "SHARED"]), 1);
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "doc", "r1", "SHARED"]), 0);
    assert_eq!(watchers(&mut conn), 1, "r1 left: r2 is still the newest");
    assert!(!watcher.is_finished());
    // A newer reader changes it.
    let (third, _, _) = read(&mut conn, "r3");
    assert_held(answer(watcher), third, "r3", 60_000);
    // The newest leaving makes an older holder the newest.
    let watcher = spawn_watch(&server, "doc", third);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "doc", "r3", "SHARED"]), 0);
    assert_held(answer(watcher), newest, "r2", 60_000);
}

#[test]
fn del_flushall_rename_restore_and_copy_wake_it() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let watcher = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(int(&mut conn, &["DEL", "job"]), 1);
    assert_eq!(answer(watcher), FREE);

    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let watcher = spawn_watch(&server, "job", token);
    let idle = spawn_watch(&server, "other", 0);
    wait_for_watchers(&mut conn, 2);
    cmd(&mut conn, &["FLUSHALL"]).unwrap();
    assert_eq!(answer(watcher), FREE);
    assert_eq!(watchers(&mut conn), 1, "a watcher knowing it free waits on");

    // RENAME: the source loses its holder, the destination gains it.
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let source = spawn_watch(&server, "job", token);
    let destination = spawn_watch(&server, "moved", 0);
    wait_for_watchers(&mut conn, 3);
    cmd(&mut conn, &["RENAME", "job", "moved"]).unwrap();
    assert_eq!(answer(source), FREE);
    assert_held(answer(destination), token, "alice", 60_000);

    // RESTORE of a dumped lock onto a watched key.
    let dump = match cmd(&mut conn, &["DUMP", "moved"]).unwrap() {
        Value::BulkString(bytes) => bytes,
        other => panic!("DUMP: {other:?}"),
    };
    let restored = spawn_watch(&server, "copy", 0);
    wait_for_watchers(&mut conn, 2);
    let expire_at = pexpiretime(&mut conn, "moved").to_string();
    let restore: [&[u8]; 5] = [b"RESTORE", b"copy", expire_at.as_bytes(), &dump, b"ABSTTL"];
    run(&mut conn, &restore).unwrap();
    assert_held(answer(restored), token, "alice", 60_000);
    assert_eq!(watchers(&mut conn), 1, "the other key's watcher waits on");

    // COPY onto a watched key.
    let copied = spawn_watch(&server, "copied", 0);
    wait_for_watchers(&mut conn, 2);
    assert_eq!(int(&mut conn, &["COPY", "moved", "copied"]), 1);
    assert_held(answer(copied), token, "alice", 60_000);
    assert_eq!(watchers(&mut conn), 1, "the other key's watcher waits on");
    drop(idle);
}

#[test]
fn unlink_wakes_it_and_flushdb_wakes_only_its_own_database() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let watcher = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(int(&mut conn, &["UNLINK", "job"]), 1);
    assert_eq!(answer(watcher), FREE);

    // The same key held in databases 0 and 1, watched in both.
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let mut in_db1 = server.connect();
    cmd(&mut in_db1, &["SELECT", "1"]).unwrap();
    let (token1, _, _) = acquire(&mut in_db1, "job", "bob", 60_000).unwrap();
    let watcher = spawn_watch(&server, "job", token);
    let watcher1 = spawn_command_in_db(
        &server,
        1,
        &["DLOCK.WATCH", "job", &token1.to_string(), "0"],
    );
    wait_for_watchers(&mut conn, 2);
    cmd(&mut conn, &["FLUSHDB"]).unwrap();
    assert_eq!(answer(watcher), FREE);
    assert_eq!(watchers(&mut conn), 1, "database 1's watcher waits on");
    assert_eq!(release(&mut in_db1, "job", "bob"), 0);
    assert_eq!(answer(watcher1), FREE);
}

#[test]
fn every_watcher_of_a_key_is_answered_by_one_change() {
    let server = Server::start();
    let mut conn = server.connect();
    let before = wakeups(&mut conn);
    let pending: Vec<Pending> = (0..24).map(|_| spawn_watch(&server, "lead", 0)).collect();
    let elsewhere = spawn_watch(&server, "elsewhere", 0);
    wait_for_watchers(&mut conn, 25);
    let (token, _, _) = acquire(&mut conn, "lead", "leader", 60_000).unwrap();
    // Every watcher of the key was answered in the acquire's own step.
    assert_eq!(watchers(&mut conn), 1, "only the other key's watcher waits");
    assert_eq!(wakeups(&mut conn) - before, 24);
    for watcher in pending {
        assert_held(answer(watcher), token, "leader", 60_000);
    }
    assert!(!elsewhere.is_finished());
    acquire(&mut conn, "elsewhere", "x", 60_000).unwrap();
    assert!(answer(elsewhere).is_some());
}

#[test]
fn multi_and_scripts_never_block() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let t = token.to_string();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("DLOCK.WATCH")
        .arg("job")
        .arg(&t)
        .arg(0)
        .cmd("DLOCK.WATCH")
        .arg("job")
        .arg(0)
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(state(replies[0].clone()), None, "the same token: null");
    assert_held(state(replies[1].clone()), token, "alice", 60_000);
    let script = "return redis.call('DLOCK.WATCH', KEYS[1], ARGV[1], '0')";
    let same = cmd(&mut conn, &["EVAL", script, "1", "job", &t]).unwrap();
    assert_eq!(same, Value::Nil);
    let differs = cmd(&mut conn, &["EVAL", script, "1", "job", "0"]).unwrap();
    assert_held(state(differs), token, "alice", 60_000);
    // A function is run like a script: it never blocks either.
    let library = "#!lua name=watchlib\n\
        redis.register_function('watch_it', function(keys, args) \
        return redis.call('DLOCK.WATCH', keys[1], args[1], '0') end)";
    cmd(&mut conn, &["FUNCTION", "LOAD", library]).unwrap();
    let same = cmd(&mut conn, &["FCALL", "watch_it", "1", "job", &t]).unwrap();
    assert_eq!(same, Value::Nil);
    let differs = cmd(&mut conn, &["FCALL", "watch_it", "1", "job", "0"]).unwrap();
    assert_held(state(differs), token, "alice", 60_000);
    assert_eq!(watchers(&mut conn), 0);
    assert_eq!(info_number(&mut conn, "clients", "blocked_clients"), 0);
}

#[test]
fn client_unblock_and_client_kill_end_a_watch() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let unblocked = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    let id = unblocked.id.to_string();
    assert_eq!(int(&mut conn, &["CLIENT", "UNBLOCK", &id]), 1);
    assert_eq!(answer(unblocked), None);

    let refused = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    let id = refused.id.to_string();
    assert_eq!(int(&mut conn, &["CLIENT", "UNBLOCK", &id, "ERROR"]), 1);
    let error = refused.join().0.unwrap_err();
    assert!(error_text(&error).starts_with("UNBLOCKED"), "{error:?}");
    assert_eq!(watchers(&mut conn), 0);

    let killed = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    let id = killed.id.to_string();
    assert_eq!(int(&mut conn, &["CLIENT", "KILL", "ID", &id]), 1);
    let error = killed.join().0.unwrap_err();
    assert!(is_broken_connection(&error), "{error:?}");
    assert_eq!(
        watchers(&mut conn),
        0,
        "a closed connection leaves no trace"
    );
    // The change that would have answered them finds nobody.
    let before = wakeups(&mut conn);
    assert_eq!(release(&mut conn, "job", "alice"), 0);
    assert_eq!(wakeups(&mut conn), before);
    assert_eq!(watch(&mut conn, "job", token, 0), FREE);
}

#[test]
fn a_watcher_on_a_replica_is_woken_by_replication() {
    let master = Server::start();
    let replica = replica_of(&master, &[]);
    let mut conn = master.connect();
    let mut on_replica = replica.connect();
    let follower = spawn_watch(&replica, "lead", 0);
    wait_for_watchers(&mut on_replica, 1);
    let (token, _, _) = acquire(&mut conn, "lead", "leader", 60_000).unwrap();
    assert_held(answer(follower), token, "leader", 60_000);

    // The release, a hand-off and an expiry, as the master replicates them.
    let follower = spawn_watch(&replica, "lead", token);
    wait_for_watchers(&mut on_replica, 1);
    let offset = info_number(&mut conn, "replication", "master_repl_offset");
    assert_held(watch(&mut conn, "lead", 0, 0), token, "leader", 60_000);
    assert_eq!(watch(&mut conn, "lead", token, 10), None);
    assert_eq!(
        info_number(&mut conn, "replication", "master_repl_offset"),
        offset,
        "WATCH is not propagated"
    );
    let waiter = block_acquire(&master, "lead", "next", 400, 0);
    wait_for_waiting(&mut conn, "lead", 1);
    assert_eq!(release(&mut conn, "lead", "leader"), 0);
    let ((next, _, _), _) = waiter.granted();
    assert_held(answer(follower), next, "next", 400);
    let follower = spawn_watch(&replica, "lead", next);
    assert_eq!(answer(follower), FREE, "the lease ended on the master");
    assert!(watchers(&mut on_replica) == 0);
}

#[test]
fn wrong_type_and_every_error_change_nothing() {
    let server = Server::start();
    let mut conn = server.connect();
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "latch", "2", "60000"]), 1);
    cmd(&mut conn, &["SET", "string", "v"]).unwrap();
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let t = token.to_string();
    let before = snapshot(&mut conn, &["job"]);
    let latch_before = (
        pexpiretime(&mut conn, "latch"),
        info_int(&mut conn, "latch", "count"),
    );
    let keys_before = int(&mut conn, &["DBSIZE"]);
    let cases: &[(&[&str], &str)] = &[
        (&["DLOCK.WATCH", "latch", "0", "0"], "WRONGTYPE"),
        (&["DLOCK.WATCH", "string", "0", "0"], "WRONGTYPE"),
        (&["DLOCK.WATCH", "job", &t], "ERR wrong number of arguments"),
        (&["DLOCK.WATCH", "job"], "ERR wrong number of arguments"),
        (&["DLOCK.WATCH", "new", "-1", "0"], "ERR invalid token"),
        (&["DLOCK.WATCH", "new", "x", "0"], "ERR invalid token"),
        (
            &["DLOCK.WATCH", "new", "9223372036854775808", "0"],
            "ERR invalid token",
        ),
        (&["DLOCK.WATCH", "new", "0", "-1"], "ERR invalid timeout"),
        (&["DLOCK.WATCH", "new", "0", "0.5"], "ERR invalid timeout"),
        (
            &["DLOCK.WATCH", "job", &t, "0", "x"],
            "ERR wrong number of arguments",
        ),
    ];
    for (args, expected) in cases {
        let error = error_of(&mut conn, args);
        assert!(error.starts_with(expected), "{args:?}: {error}");
    }
    assert_eq!(int(&mut conn, &["DBSIZE"]), keys_before);
    assert_eq!(snapshot(&mut conn, &["job"]), before);
    assert_eq!(
        (
            pexpiretime(&mut conn, "latch"),
            info_int(&mut conn, "latch", "count")
        ),
        latch_before
    );
    assert_eq!(
        cmd(&mut conn, &["GET", "string"]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
    assert_eq!(int(&mut conn, &["EXISTS", "new"]), 0);
    assert_eq!(watchers(&mut conn), 0);
    assert_eq!(info_number(&mut conn, "clients", "blocked_clients"), 0);
}

#[test]
fn it_watches_during_the_grace_window() {
    let server = Server::with_args(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "yes",
        "--dlock.max-lease-ms",
        "5000",
    ]);
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "lead", "leader", 5000).unwrap();
    config_set(&mut conn, "dlock.grace-ms", "3000");
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut conn).unwrap();
    let remaining = || info_number(&mut server.connect(), "dlock", "dlock_grace_remaining_ms");
    assert!(remaining() > 1000, "a reload opens a window");
    assert_held(watch(&mut conn, "lead", 0, 0), token, "leader", 5000);
    let follower = spawn_watch(&server, "lead", token);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(release(&mut conn, "lead", "leader"), 0);
    assert_eq!(answer(follower), FREE);
    assert!(remaining() > 0, "answered inside the window");
}

#[test]
fn command_info_declares_a_read_only_blocking_command() {
    let server = Server::start();
    let mut conn = server.connect();
    let info = format!(
        "{:?}",
        cmd(&mut conn, &["COMMAND", "INFO", "dlock.watch"]).unwrap()
    );
    assert!(info.contains("dlock.watch"), "{info}");
    assert!(
        info.contains("readonly") && info.contains("blocking") && info.contains("RO"),
        "{info}"
    );
    assert!(
        !info.contains("denyoom") && !info.contains("write"),
        "{info}"
    );
    let keys = cmd(
        &mut conn,
        &["COMMAND", "GETKEYS", "DLOCK.WATCH", "lead", "0", "0"],
    )
    .unwrap();
    assert_eq!(
        keys,
        Value::Array(vec![Value::BulkString(b"lead".to_vec())])
    );
    let docs = format!(
        "{:?}",
        cmd(&mut conn, &["COMMAND", "DOCS", "dlock.watch"]).unwrap()
    );
    for word in ["summary", "complexity", "key", "token", "timeout"] {
        assert!(docs.contains(word), "COMMAND DOCS lacks {word}: {docs}");
    }
    // A read-only ACL user may watch, and may not acquire.
    cmd(
        &mut conn,
        &["ACL", "SETUSER", "reader", "on", ">pw", "%R~*", "+@all"],
    )
    .unwrap();
    let mut reader = server.connect();
    cmd(&mut reader, &["AUTH", "reader", "pw"]).unwrap();
    assert_eq!(watch(&mut reader, "lead", 1, 0), FREE);
    let error = error_of(&mut reader, &["DLOCK.ACQUIRE", "lead", "me", "1000"]);
    assert!(error.starts_with("NOPERM"), "{error}");
}

#[test]
fn session_close_move_and_swapdb_wake_it() {
    let server = Server::start();
    let mut conn = server.connect();
    // The holder's SESSION connection closes: its hold ends.
    let mut holder = server.connect();
    let (token, _, _) = grant(
        cmd(
            &mut holder,
            &["DLOCK.ACQUIRE", "job", "alice", "60000", "SESSION"],
        )
        .unwrap(),
    )
    .unwrap();
    let watcher = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    drop(holder);
    assert_eq!(answer(watcher), FREE);

    // MOVE to another database: the source loses it, the target gains it.
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    let source = spawn_watch(&server, "job", token);
    let target = spawn_command_in_db(&server, 1, &["DLOCK.WATCH", "job", "0", "0"]);
    wait_for_watchers(&mut conn, 2);
    assert_eq!(int(&mut conn, &["MOVE", "job", "1"]), 1);
    assert_eq!(answer(source), FREE);
    assert_held(answer(target), token, "alice", 60_000);

    // SWAPDB brings it back under database 0.
    let swapped = spawn_watch(&server, "job", 0);
    wait_for_watchers(&mut conn, 1);
    cmd(&mut conn, &["SWAPDB", "0", "1"]).unwrap();
    assert_held(answer(swapped), token, "alice", 60_000);
    assert_eq!(watchers(&mut conn), 0);
}

#[test]
fn a_promoted_replica_ends_the_leases_its_watchers_wait_on() {
    let master = Server::start();
    let replica = replica_of(&master, &["--enable-debug-command", "yes"]);
    let mut conn = master.connect();
    let mut on_replica = replica.connect();
    // Only the module's timer may end the lease on the promoted replica.
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut on_replica)
        .unwrap();
    let (token, _, _) = acquire(&mut conn, "lead", "leader", 2_000).unwrap();
    wait_for_replica(&mut conn);
    let follower = spawn_watch(&replica, "lead", token);
    wait_for_watchers(&mut on_replica, 1);
    cmd(&mut on_replica, &["REPLICAOF", "NO", "ONE"]).unwrap();
    assert_eq!(answer(follower), FREE);
}

#[test]
fn batch_grants_and_multi_key_grants_wake_it() {
    let server = Server::start();
    let mut conn = server.connect();
    // A writer's release grants two queued readers in one step: the watcher
    // is told the newer of the two.
    let (token, _, _) = acquire(&mut conn, "doc", "writer", 60_000).unwrap();
    let mut readers = Vec::new();
    for (queued, owner) in ["r1", "r2"].into_iter().enumerate() {
        readers.push(spawn_command(
            &server,
            &[
                "DLOCK.ACQUIRE",
                "doc",
                owner,
                "60000",
                "SHARED",
                "BLOCK",
                "0",
            ],
        ));
        wait_for_waiting(&mut conn, "doc", queued as i64 + 1);
    }
    let watcher = spawn_watch(&server, "doc", token);
    wait_for_watchers(&mut conn, 1);
    assert_eq!(release(&mut conn, "doc", "writer"), 0);
    let granted: Vec<i64> = readers.into_iter().map(|r| r.granted().0 .0).collect();
    let newest = *granted.iter().max().unwrap();
    assert_held(answer(watcher), newest, "r2", 60_000);

    // A multi-key grant answers the watchers of every key.
    let first = spawn_watch(&server, "{m}a", 0);
    let second = spawn_watch(&server, "{m}b", 0);
    wait_for_watchers(&mut conn, 2);
    let reply = cmd(
        &mut conn,
        &["DLOCK.MACQUIRE", "2", "{m}a", "{m}b", "both", "60000"],
    )
    .unwrap();
    assert!(matches!(reply, Value::Array(_)), "{reply:?}");
    assert_eq!(answer(first).unwrap().1.as_deref(), Some(&b"both"[..]));
    assert_eq!(answer(second).unwrap().1.as_deref(), Some(&b"both"[..]));
}

#[test]
fn another_type_arriving_at_a_watched_key_is_no_holder() {
    let server = Server::start();
    let mut conn = server.connect();
    let watcher = spawn_watch(&server, "job", 0);
    wait_for_watchers(&mut conn, 1);
    // A latch, then a string, at the watched key; the lock commands that
    // meet them fail with WRONGTYPE and the watcher waits on.
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "job", "2", "60000"]), 1);
    for args in [
        &["DLOCK.ACQUIRE", "job", "alice", "60000"][..],
        &["DLOCK.RELEASE", "job", "alice"],
        &["DLOCK.ACQUIRE", "job", "alice", "60000", "SHARED"],
    ] {
        assert!(error_of(&mut conn, args).starts_with("WRONGTYPE"));
    }
    cmd(&mut conn, &["SET", "job", "v"]).unwrap();
    assert!(
        error_of(&mut conn, &["DLOCK.ACQUIRE", "job", "alice", "60000"]).starts_with("WRONGTYPE")
    );
    cmd(&mut conn, &["RENAME", "job", "job2"]).unwrap();
    assert_eq!(watchers(&mut conn), 1);
    assert!(!watcher.is_finished());
    let (token, _, _) = acquire(&mut conn, "job", "alice", 60_000).unwrap();
    assert_held(answer(watcher), token, "alice", 60_000);
}

#[test]
fn eviction_wakes_it() {
    let server = Server::start();
    let mut conn = server.connect();
    let (token, _, _) = acquire(&mut conn, "job", "holder", 60_000).unwrap();
    let watcher = spawn_watch(&server, "job", token);
    wait_for_watchers(&mut conn, 1);
    // Filler without a ttl: under volatile-ttl the lock (which has one) is
    // the only key Redis may evict.
    let filler = "x".repeat(10_000);
    for i in 0..200 {
        cmd(&mut conn, &["SET", &format!("filler:{i}"), &filler]).unwrap();
    }
    config_set(&mut conn, "maxmemory-policy", "volatile-ttl");
    let used = info_number(&mut conn, "memory", "used_memory");
    config_set(&mut conn, "maxmemory", &(used / 2).to_string());
    // A write makes Redis evict (it may also refuse it with OOM).
    let _ = cmd(&mut conn, &["SET", "trigger", "1"]);
    assert_eq!(answer(watcher), FREE);
    assert_ne!(info_field(&mut conn, "stats", "evicted_keys"), "0");
    config_set(&mut conn, "maxmemory", "0");
}
