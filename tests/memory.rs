//! Memory pressure: with `maxmemory` below the memory in use and
//! `noeviction`, the commands that only give back or extend what the caller
//! holds (RELEASE, with its hand-off to a blocked waiter, RENEW, COUNTDOWN)
//! still run, as `DEL` and `PEXPIRE` do; the commands that create state
//! (ACQUIRE, FAIR, MACQUIRE, LATCH) are refused with `OOM`.

use crate::common;

use common::*;

/// Puts the server over `maxmemory` (half the memory it uses now) with
/// `noeviction`, and checks Redis itself now refuses a plain write.
fn exceed_maxmemory(conn: &mut Connection) {
    config_set(conn, "maxmemory-policy", "noeviction");
    let used: u64 = info_field(conn, "memory", "used_memory")
        .parse()
        .expect("used_memory is a number");
    config_set(conn, "maxmemory", &(used / 2).to_string());
    let refused = error_of(conn, &["SET", "plain", "v"]);
    assert!(refused.starts_with("OOM"), "SET over maxmemory: {refused}");
}

#[test]
fn giving_back_works_over_maxmemory_and_creating_is_refused() {
    let server = Server::start();
    let mut conn = server.connect();
    let (held_token, _, _) = acquire(&mut conn, "held", "holder", 60_000).expect("held is free");
    let next = spawn_command(
        &server,
        &["DLOCK.ACQUIRE", "held", "next", "60000", "BLOCK", "0"],
    );
    wait_for_waiting(&mut conn, "held", 1);
    let (renewed_token, _, _) =
        acquire(&mut conn, "renewed", "renewer", 1_000).expect("renewed is free");
    assert_eq!(int(&mut conn, &["DLOCK.LATCH", "gate", "2", "60000"]), 1);
    let awaiter = spawn_command(&server, &["DLOCK.AWAIT", "gate", "0"]);
    wait_for_blocked_clients(&mut conn, 2);

    exceed_maxmemory(&mut conn);

    // Creating state is refused, and creates nothing.
    for args in [
        &["DLOCK.ACQUIRE", "new", "someone", "60000"][..],
        &["DLOCK.FAIR", "new", "someone", "60000"],
        &["DLOCK.MACQUIRE", "1", "new", "someone", "60000"],
        &["DLOCK.LATCH", "new", "1", "60000"],
    ] {
        let refused = error_of(&mut conn, args);
        assert!(refused.starts_with("OOM"), "{args:?}: {refused}");
    }
    assert!(
        info(&mut conn, "new").is_none(),
        "a refused command created the key"
    );

    // RENEW extends the lease it holds.
    assert_eq!(
        int(&mut conn, &["DLOCK.RENEW", "renewed", "renewer", "60000"]),
        renewed_token
    );
    let pttl = int(&mut conn, &["PTTL", "renewed"]);
    assert!(pttl > 1_000, "RENEW did not extend the lease: pttl {pttl}");

    // RELEASE gives the lock back and hands it to the blocked waiter.
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "held", "holder"]), 0);
    let ((next_token, holds, owner), _) = next.granted();
    assert!(next_token > held_token, "the hand-off has a newer token");
    assert_eq!((holds, owner), (1, b"next".to_vec()));
    assert_eq!(info_owner(&mut conn, "held"), Some(b"next".to_vec()));
    // ... and the new holder can release in turn, deleting the key.
    assert_eq!(int(&mut conn, &["DLOCK.RELEASE", "held", "next"]), 0);
    assert!(info(&mut conn, "held").is_none(), "the free lock was kept");

    // COUNTDOWN counts down, and opens the latch for its awaiter.
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "gate"]), 1);
    assert_eq!(int(&mut conn, &["DLOCK.COUNTDOWN", "gate"]), 0);
    let (opened, _) = awaiter.join();
    assert_eq!(opened.expect("DLOCK.AWAIT failed"), Value::Int(1));
    assert_eq!(
        int(&mut conn, &["EXISTS", "gate"]),
        0,
        "the open latch was kept"
    );

    // Still over maxmemory: the refusals above were not a passing state.
    let refused = error_of(&mut conn, &["DLOCK.ACQUIRE", "held", "someone", "60000"]);
    assert!(
        refused.starts_with("OOM"),
        "ACQUIRE of a free lock: {refused}"
    );
    assert!(!server.log().contains("panicked"), "a panic was logged");
}
