//! A master and a replica: every lock change reaches the replica as the same
//! state, the replica refuses writes, and a promoted replica keeps issuing
//! larger fencing tokens.

use crate::common;

use common::*;

#[test]
fn replica_matches_the_master_after_a_mixed_workload() {
    let master = Server::start();
    let replica = replica_of(&master, &[]);
    let mut on_master = master.connect();
    let mut on_replica = replica.connect();

    let mut keys: Vec<String> = Vec::new();
    for i in 0..30 {
        let key = format!("lock:{i}");
        let owner = if i % 5 == 0 {
            "*".to_string()
        } else {
            format!("owner-{}", i % 3)
        };
        let (_, _, granted_owner) = acquire(&mut on_master, &key, &owner, 600_000).unwrap();
        let granted_owner = String::from_utf8(granted_owner).unwrap();
        match i % 6 {
            1 => {
                acquire(&mut on_master, &key, &granted_owner, 700_000).unwrap();
            }
            2 => {
                assert_eq!(
                    int(&mut on_master, &["DLOCK.RELEASE", &key, &granted_owner]),
                    0
                );
            }
            3 => {
                int(
                    &mut on_master,
                    &["DLOCK.RENEW", &key, &granted_owner, "900000"],
                );
            }
            4 => {
                acquire(&mut on_master, &key, &granted_owner, 600_000).unwrap();
                assert_eq!(
                    int(&mut on_master, &["DLOCK.RELEASE", &key, &granted_owner]),
                    1
                );
            }
            5 => {
                assert_eq!(int(&mut on_master, &["DEL", &key]), 1);
                acquire(&mut on_master, &key, "after-del", 600_000).unwrap();
            }
            _ => {}
        }
        keys.push(key);
    }
    // A lease that ends: the master's expiry reaches the replica as a DEL.
    acquire(&mut on_master, "short", "me", 50).unwrap();
    wait_until("the short lease to end on the master", || {
        int(&mut on_master, &["EXISTS", "short"]) == 0
    });
    keys.push("short".to_string());

    wait_for_replica(&mut on_master);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let on_master_state = snapshot(&mut on_master, &keys);
    let on_replica_state = snapshot(&mut on_replica, &keys);
    assert_eq!(on_master_state, on_replica_state);
    let master_keys: i64 = int(&mut on_master, &["DBSIZE"]);
    wait_until("the replica to drop the expired key", || {
        int(&mut on_replica, &["DBSIZE"]) == master_keys
    });
}

#[test]
fn replica_refuses_writes_and_serves_info() {
    let master = Server::start();
    let replica = replica_of(&master, &[]);
    let mut on_master = master.connect();
    let mut on_replica = replica.connect();
    acquire(&mut on_master, "job", "me", 600_000).unwrap();
    wait_for_replica(&mut on_master);
    for command in [
        &["DLOCK.ACQUIRE", "job", "me", "1000"][..],
        &["DLOCK.ACQUIRE", "other", "me", "1000"],
        &["DLOCK.RELEASE", "job", "me"],
        &["DLOCK.RENEW", "job", "me", "1000"],
    ] {
        let error = error_of(&mut on_replica, command);
        assert!(error.starts_with("READONLY"), "{command:?}: {error}");
    }
    assert_eq!(info_owner(&mut on_replica, "job"), Some(b"me".to_vec()));
    assert_eq!(info_int(&mut on_replica, "job", "holds"), 1);
}

#[test]
fn a_promoted_replica_issues_larger_tokens_than_the_old_master() {
    // The master's counter starts far above the wall clock, so only the
    // replicated counter (not the clock floor) can keep tokens increasing.
    let seeded: u64 = 6_000_000_000_000_000_000;
    let aof = aof_with_token(seeded);
    let master = Server::with_files(
        &[("appendonly.aof", &aof)],
        &["--save", "", "--appendonly", "yes"],
    );
    let mut on_master = master.connect();
    let mut highest = seeded as i64;
    for i in 0..5 {
        let (token, _, _) = acquire(&mut on_master, &format!("k{i}"), "me", 600_000).unwrap();
        assert!(token > highest);
        highest = token;
    }
    let replica = replica_of(&master, &[]);
    // Grants after the full sync travel as DLOCK.SETSTATE; then every lock is
    // released, so the replica's counter cannot come from a live key.
    for i in 5..10 {
        let (token, _, _) = acquire(&mut on_master, &format!("k{i}"), "me", 600_000).unwrap();
        highest = highest.max(token);
    }
    let _: () = redis::cmd("FLUSHALL").query(&mut on_master).unwrap();
    wait_for_replica(&mut on_master);

    let mut on_replica = replica.connect();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut on_replica)
        .unwrap();
    wait_for_info(&mut on_replica, "replication", "role:master");
    let (token, _, _) = acquire(&mut on_replica, "k0", "new-master", 600_000).unwrap();
    assert!(
        token > highest,
        "token {token} after promotion, {highest} before"
    );
}

fn stat(conn: &mut Connection, section: &str, field: &str) -> i64 {
    let text: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
}

/// The module skips building its replication effects while nothing listens
/// (no AOF, no replica, no backlog). Changes made then must still reach a
/// replica that attaches later (through the full sync), and changes made
/// while an attached replica is briefly away must reach it through the
/// backlog (partial resync).
#[test]
fn changes_reach_a_late_replica_and_one_that_resyncs_partially() {
    let master = Server::start();
    let mut on_master = master.connect();
    let mut keys: Vec<String> = Vec::new();
    for i in 0..5 {
        let key = format!("before:{i}");
        acquire(&mut on_master, &key, "early", 600_000).unwrap();
        keys.push(key);
    }
    int(&mut on_master, &["DLOCK.RELEASE", "before:0", "early"]);

    let replica = replica_of(&master, &[]);
    for i in 0..5 {
        let key = format!("after:{i}");
        acquire(&mut on_master, &key, "late", 600_000).unwrap();
        keys.push(key);
    }
    wait_for_replica(&mut on_master);

    // Drop the replica's link; it comes back with PSYNC from the backlog.
    let partial_before = stat(&mut on_master, "stats", "sync_partial_ok");
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut on_master)
        .unwrap();
    for i in 0..5 {
        let key = format!("away:{i}");
        acquire(&mut on_master, &key, "meanwhile", 600_000).unwrap();
        keys.push(key);
    }
    acquire(&mut on_master, "after:1", "late", 600_000).unwrap();
    int(&mut on_master, &["DLOCK.RELEASE", "after:2", "late"]);
    wait_until("the replica to resync", || {
        stat(&mut on_master, "stats", "sync_partial_ok") > partial_before
            && stat(&mut on_master, "replication", "connected_slaves") == 1
    });
    wait_for_replica(&mut on_master);

    let mut on_replica = replica.connect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(
        snapshot(&mut on_master, &keys),
        snapshot(&mut on_replica, &keys)
    );
    assert_eq!(info_int(&mut on_replica, "after:1", "holds"), 2);
    assert_eq!(info(&mut on_replica, "after:2"), None);
    assert_eq!(info(&mut on_replica, "before:0"), None);
}
