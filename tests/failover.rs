//! Failover: a master and a replica under a workload with blocked waiters,
//! hand-offs and lease expiries; some holds are acknowledged with
//! `WAIT 1 2000`. Then the replica is promoted and the clients move to it:
//!
//! * every hold acknowledged by WAIT (and not touched since) is on the new
//!   master with the same owner, holds and token, unless its lease has ended;
//! * every token the new master issues is above every token the old one
//!   acknowledged;
//! * clients blocked on the old master are answered (null or an error) or
//!   disconnected, and none waits past its BLOCK timeout;
//! * after an orderly failover (writes paused until the replica caught up,
//!   old master demoted with REPLICAOF) nothing at all is lost, and the old
//!   master, now a replica, converges to the new one.
//!
//! The orderly test runs with a token counter far above the clock, so that
//! token order across the failover rests on replication alone; the killed
//! master test uses clock-floor tokens, which is what protects grants the
//! dead master never replicated (docs/design.md, "Why the wall-clock floor
//! matters").

use crate::common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Slack for the millisecond rounding of deadlines (µs).
const MARGIN_US: i64 = 2_000;

/// How long past its BLOCK timeout a waiter of the old master may take to be
/// answered on a noisy machine.
const SLACK: Duration = Duration::from_secs(3);

/// BLOCK timeout of the clients still waiting on the old master at failover.
const FINAL_WAIT_MS: u64 = 4_000;

/// `dlock.fair-reservation-ms` on both servers: refused FAIR calls of the
/// churn must not stall its queues for the default 5 s.
const RESERVATION_MS: &str = "100";

/// A replica whose reservations last as briefly as the master's.
fn short_reservation_replica(master: &Server) -> Server {
    config_set(
        &mut master.connect(),
        "dlock.fair-reservation-ms",
        RESERVATION_MS,
    );
    replica_of(master, &["--dlock.fair-reservation-ms", RESERVATION_MS])
}

/// `WAIT 1 2000` on `conn`: whether the replica acknowledged its writes.
fn replicated(conn: &mut Connection) -> bool {
    try_replicated(conn).expect("WAIT")
}

/// `replicated`, for the churn, whose master may die during the WAIT.
fn try_replicated(conn: &mut Connection) -> redis::RedisResult<bool> {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2_000).query(conn)?;
    Ok(acked == 1)
}

/// A hold whose latest change was acknowledged by the replica (WAIT == 1),
/// and which its client has not touched since.
#[derive(Clone, Debug)]
struct Confirmed {
    key: String,
    owner: String,
    holds: i64,
    token: i64,
    /// The lease certainly lasts until then (µs): sent + ttl of the last change.
    live_until: i64,
    /// Granted to a blocked waiter (a hand-off).
    handed: bool,
}

#[derive(Default)]
struct Figures {
    grants: u64,
    handed: u64,
    expiries_seen: u64,
    releases: u64,
    waits: u64,
    waits_confirmed: u64,
    violations: Vec<String>,
}

struct Shared {
    port: u16,
    seed: u64,
    /// Whether a replica is there to acknowledge WAIT.
    replicated: bool,
    stop: AtomicBool,
    /// The highest token any client was told.
    max_acked: AtomicU64,
    figures: Mutex<Figures>,
}

/// Churn on a few keys with short leases: BLOCK 0 and immediate acquires,
/// releases and walk-aways (expiries), WAIT after some grants. Checks that
/// each new token is above every token acknowledged before it was asked for.
fn churn(shared: Arc<Shared>, thread: u64) {
    let mut rng = TestRng::fork(shared.seed, thread);
    let mut conn = connect_port(shared.port, Duration::from_secs(20));
    let mut figures = Figures::default();
    let mut round = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        round += 1;
        let key = format!("fo:churn:{}", rng.below(3));
        let owner = format!("c{thread}.{round}");
        let ttl = rng.between(30, 300);
        let blocking = rng.percent(60);
        let mut args = vec![
            if rng.percent(50) {
                "DLOCK.ACQUIRE"
            } else {
                "DLOCK.FAIR"
            }
            .to_string(),
            key.clone(),
            owner.clone(),
            ttl.to_string(),
        ];
        if blocking {
            args.extend(["BLOCK".to_string(), "0".to_string()]);
        }
        let strs: Vec<&str> = args.iter().map(String::as_str).collect();
        let floor = shared.max_acked.load(Ordering::SeqCst);
        let sent = wall_us();
        let reply = cmd(&mut conn, &strs);
        let recv = wall_us();
        let (token, _holds, _owner) = match reply.map(grant) {
            Ok(Some(granted)) => granted,
            Ok(None) => {
                std::thread::sleep(Duration::from_millis(rng.between(1, 10)));
                continue;
            }
            // The master died under it: this client is done.
            Err(error) if is_broken_connection(&error) => break,
            Err(error) => {
                figures.violations.push(format!("{strs:?}: {error}"));
                break;
            }
        };
        figures.grants += 1;
        if blocking && recv - sent > 2_000 {
            figures.handed += 1;
        }
        if token as u64 <= floor {
            figures.violations.push(format!(
                "{strs:?}: token {token} not above {floor}, acknowledged before"
            ));
        }
        shared.max_acked.fetch_max(token as u64, Ordering::SeqCst);
        if shared.replicated && rng.percent(40) {
            figures.waits += 1;
            match try_replicated(&mut conn) {
                Ok(true) => figures.waits_confirmed += 1,
                Ok(false) => {}
                // The master was killed during the WAIT: this client is done.
                Err(error) if is_broken_connection(&error) => break,
                Err(error) => {
                    figures.violations.push(format!("WAIT: {error}"));
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(rng.between(0, 40)));
        if rng.percent(75) {
            match cmd(&mut conn, &["DLOCK.RELEASE", &key, &owner]) {
                Ok(_) => figures.releases += 1,
                Err(error) if error.code() == Some("NOTOWNER") => {
                    figures.expiries_seen += 1;
                    if wall_us() - sent < 1_000 * ttl as i64 - MARGIN_US {
                        figures
                            .violations
                            .push(format!("{owner} lost {key} before its lease could end"));
                    }
                }
                Err(error) if is_broken_connection(&error) => break,
                Err(error) => figures.violations.push(format!("RELEASE: {error}")),
            }
        } else {
            figures.expiries_seen += 1;
        }
    }
    let mut total = shared.figures.lock().unwrap();
    total.grants += figures.grants;
    total.handed += figures.handed;
    total.expiries_seen += figures.expiries_seen;
    total.releases += figures.releases;
    total.waits += figures.waits;
    total.waits_confirmed += figures.waits_confirmed;
    total.violations.extend(figures.violations);
}

fn start_churn(shared: &Arc<Shared>, threads: u64) -> Vec<std::thread::JoinHandle<()>> {
    shared.stop.store(false, Ordering::SeqCst);
    (0..threads)
        .map(|t| {
            let shared = Arc::clone(shared);
            std::thread::spawn(move || churn(shared, t))
        })
        .collect()
}

fn stop_churn(shared: &Shared, handles: Vec<std::thread::JoinHandle<()>>) {
    shared.stop.store(true, Ordering::SeqCst);
    for handle in handles {
        handle.join().expect("a churn thread panicked");
    }
}

/// Runs `threads` churn threads against `shared.port` for `run_for`.
fn run_churn(shared: &Arc<Shared>, threads: u64, run_for: Duration) {
    let handles = start_churn(shared, threads);
    let started = Instant::now();
    while started.elapsed() < run_for {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_churn(shared, handles);
}

/// A grant on its own connection, followed there by `WAIT 1 2000`.
/// What [`acquire_and_wait`] saw: token, holds, sent, answered, WAIT == 1.
type WaitedGrant = (i64, i64, i64, i64, bool);

fn acquire_and_wait(port: u16, args: Vec<String>) -> std::thread::JoinHandle<WaitedGrant> {
    std::thread::spawn(move || {
        let mut conn = connect_port(port, Duration::from_secs(20));
        let strs: Vec<&str> = args.iter().map(String::as_str).collect();
        let sent = wall_us();
        let (token, holds, _) = grant(cmd(&mut conn, &strs).expect("blocked acquire"))
            .expect("the waiter was not granted");
        let recv = wall_us();
        (token, holds, sent, recv, replicated(&mut conn))
    })
}

/// The durable phase: long leases acknowledged by WAIT, half of them handed
/// over from a short lease to a blocked waiter. Returns what was confirmed
/// and what was acknowledged without WAIT.
fn durable_phase(master: &Server, shared: &Shared) -> (Vec<Confirmed>, Vec<Confirmed>) {
    let mut conn = master.connect();
    let mut confirmed = Vec::new();
    let mut unconfirmed = Vec::new();
    let ttl = 30_000;
    for p in 0..3 {
        // A short lease, a waiter queued behind it, a hand-off on expiry.
        let key = format!("fo:handed:{p}");
        acquire(&mut conn, &key, &format!("short{p}"), 300).expect("free key");
        let waiter = acquire_and_wait(
            master.port,
            [
                "DLOCK.ACQUIRE",
                &key,
                &format!("heir{p}"),
                "30000",
                "BLOCK",
                "0",
            ]
            .map(String::from)
            .to_vec(),
        );
        let (token, holds, sent, recv, ok) = waiter.join().expect("the heir panicked");
        shared.max_acked.fetch_max(token as u64, Ordering::SeqCst);
        assert!(ok, "WAIT after the hand-off of {key} timed out");
        confirmed.push(Confirmed {
            key,
            owner: format!("heir{p}"),
            holds,
            token,
            live_until: sent + 1_000 * ttl - MARGIN_US,
            handed: recv - sent > 50_000,
        });

        // A direct grant, re-entered or renewed, then WAIT.
        let key = format!("fo:solo:{p}");
        let owner = format!("solo{p}");
        let sent = wall_us();
        let (token, mut holds, _) = acquire(&mut conn, &key, &owner, ttl as u64).unwrap();
        let mut last_change = sent;
        if p == 1 {
            last_change = wall_us();
            holds = acquire(&mut conn, &key, &owner, ttl as u64).unwrap().1;
        }
        if p == 2 {
            last_change = wall_us();
            assert_eq!(
                int(&mut conn, &["DLOCK.RENEW", &key, &owner, "40000"]),
                token
            );
        }
        shared.max_acked.fetch_max(token as u64, Ordering::SeqCst);
        let lease = if p == 2 { 40_000 } else { ttl };
        assert!(replicated(&mut conn), "WAIT for {key} timed out");
        confirmed.push(Confirmed {
            key,
            owner,
            holds,
            token,
            live_until: last_change + 1_000 * lease - MARGIN_US,
            handed: false,
        });
    }
    // Acknowledged without WAIT, on a connection that never waits.
    let mut quiet = master.connect();
    for p in 0..3 {
        let key = format!("fo:quiet:{p}");
        let sent = wall_us();
        let (token, holds, _) = acquire(&mut quiet, &key, "quiet", ttl as u64).unwrap();
        shared.max_acked.fetch_max(token as u64, Ordering::SeqCst);
        unconfirmed.push(Confirmed {
            key,
            owner: "quiet".to_string(),
            holds,
            token,
            live_until: sent + 1_000 * ttl - MARGIN_US,
            handed: false,
        });
    }
    (confirmed, unconfirmed)
}

/// Clients left waiting on the old master's held locks (one of them FAIR
/// with SESSION).
fn final_waiters(master: &Server) -> Vec<Pending> {
    let mut conn = master.connect();
    let timeout = FINAL_WAIT_MS.to_string();
    let mut waiters = Vec::new();
    for i in 0..4 {
        let key = format!("fo:solo:{}", i % 3);
        let owner = format!("late{i}");
        let command = if i == 3 {
            "DLOCK.FAIR"
        } else {
            "DLOCK.ACQUIRE"
        };
        let mut args = vec![command, &key, &owner, "10000", "BLOCK", &timeout];
        if i == 3 {
            args.push("SESSION");
        }
        let before = waiting(&mut conn, &key);
        waiters.push(spawn_command(master, &args));
        wait_for_waiting(&mut conn, &key, before + 1);
    }
    waiters
}

/// Every confirmed hold is on `conn`'s server, unless its lease has ended.
fn check_confirmed(conn: &mut Connection, holds: &[Confirmed], what: &str) -> Vec<String> {
    let mut violations = Vec::new();
    for hold in holds {
        let asked = wall_us();
        let owner = info_owner(conn, &hold.key);
        let seen = owner.as_ref().map(|owner| {
            (
                String::from_utf8_lossy(owner).into_owned(),
                info_int(conn, &hold.key, "holds"),
                info_int(conn, &hold.key, "token"),
            )
        });
        let expected = (hold.owner.clone(), hold.holds, hold.token);
        match seen {
            Some(seen) if seen == expected => {}
            None if asked >= hold.live_until => {}
            other => violations.push(format!(
                "{what}: {} on the new master is {other:?}, acknowledged {expected:?} (handed over: {})",
                hold.key, hold.handed
            )),
        }
    }
    violations
}

/// Every waiter of the old master returns, without the lock, by its timeout.
fn check_waiters(waiters: Vec<Pending>, what: &str) -> (Vec<String>, Vec<String>) {
    let mut violations = Vec::new();
    let mut outcomes = Vec::new();
    for waiter in waiters {
        let deadline = waiter.sent + Duration::from_millis(FINAL_WAIT_MS) + SLACK;
        while !waiter.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !waiter.is_finished() {
            violations.push(format!(
                "{what}: a waiter of the old master still waits past its {FINAL_WAIT_MS} ms timeout"
            ));
            // Its read timeout ends the thread eventually; do not join.
            continue;
        }
        let sent = waiter.sent;
        let (reply, at) = waiter.join();
        let took = at.duration_since(sent).as_millis();
        match reply {
            Ok(Value::Nil) => outcomes.push(format!("null after {took} ms")),
            Err(error) => outcomes.push(format!("error after {took} ms ({error})")),
            Ok(other) => violations.push(format!(
                "{what}: a waiter of the old master got {other:?} after the failover began"
            )),
        }
    }
    (violations, outcomes)
}

fn replication_offset(conn: &mut Connection) -> i64 {
    info_number(conn, "replication", "master_repl_offset")
}

/// The promoted replica answers writes as a master.
fn promote(replica: &mut Connection) {
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(replica)
        .expect("REPLICAOF NO ONE");
    wait_for_info(replica, "replication", "role:master");
}

fn report(what: &str, shared: &Shared, started: Instant, extra: &str) {
    let figures = shared.figures.lock().unwrap();
    eprintln!(
        "{what}: {:.1} s; churn: {} grants ({} after waiting), {} releases, {} leases run out, {}/{} WAITs acknowledged; {extra}; violations: {}",
        started.elapsed().as_secs_f64(),
        figures.grants,
        figures.handed,
        figures.releases,
        figures.expiries_seen,
        figures.waits_confirmed,
        figures.waits,
        figures.violations.len()
    );
    assert!(
        figures.violations.is_empty(),
        "{what}: {} violations:\n{}",
        figures.violations.len(),
        figures.violations.join("\n")
    );
    assert!(figures.handed > 0, "{what}: no hand-off in the churn");
}

/// The master dies (SIGKILL) with clients blocked on it; the replica is
/// promoted and the clients move there.
#[test]
fn killed_master_promoted_replica_keeps_acknowledged_locks() {
    let started = Instant::now();
    let mut master = Server::start();
    let replica = short_reservation_replica(&master);
    let shared = Arc::new(Shared {
        port: master.port,
        seed: seed_from_env("DLOCK_FAILOVER_SEED"),
        replicated: true,
        stop: AtomicBool::new(false),
        max_acked: AtomicU64::new(0),
        figures: Mutex::default(),
    });
    // The churn goes on until the master dies under it.
    let churning = start_churn(&shared, 6);
    let warm_up = Instant::now();
    while warm_up.elapsed() < Duration::from_millis(1_000) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (confirmed, _unconfirmed) = durable_phase(&master, &shared);
    let waiters = final_waiters(&master);

    master.kill();
    stop_churn(&shared, churning);
    let mut conn = replica.connect();
    promote(&mut conn);
    let mut violations = check_confirmed(&mut conn, &confirmed, "killed master");
    let (waiter_violations, outcomes) = check_waiters(waiters, "killed master");
    violations.extend(waiter_violations);

    // The clients move to the new master.
    let old_max = shared.max_acked.load(Ordering::SeqCst);
    let moved = Arc::new(Shared {
        port: replica.port,
        seed: shared.seed + 1,
        replicated: false,
        stop: AtomicBool::new(false),
        max_acked: AtomicU64::new(old_max),
        figures: Mutex::default(),
    });
    run_churn(&moved, 6, Duration::from_millis(800));
    let first_new = acquire(&mut conn, "fo:after", "new", 10_000).unwrap().0 as u64;
    if first_new <= old_max {
        violations.push(format!(
            "new master issued {first_new}, not above {old_max} from the old one"
        ));
    }
    for hold in confirmed.iter().filter(|h| wall_us() < h.live_until) {
        if acquire(&mut conn, &hold.key, "usurper", 1_000).is_some() {
            violations.push(format!("{} was granted to another owner", hold.key));
        }
    }
    report("failover (killed master), before", &shared, started, "");
    report(
        "failover (killed master), after",
        &moved,
        started,
        &format!(
            "{} WAIT-acknowledged holds checked ({} handed over); old master's waiters: {outcomes:?}",
            confirmed.len(),
            confirmed.iter().filter(|h| h.handed).count()
        ),
    );
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// Orderly failover: writes paused on the master until the replica has
/// everything, replica promoted, old master demoted to a replica of it.
/// Nothing acknowledged is lost, WAIT or not; tokens continue above the old
/// ones although they run far above the clock; the old master converges.
#[test]
fn orderly_failover_loses_nothing_and_keeps_token_order() {
    let started = Instant::now();
    let first_token = wall_us() as u64 + 1_000_000_000_000_000;
    let aof = aof_with_token(first_token);
    let master = Server::with_files(
        &[("appendonly.aof", &aof)],
        &["--appendonly", "yes", "--save", ""],
    );
    let replica = short_reservation_replica(&master);
    let shared = Arc::new(Shared {
        port: master.port,
        seed: seed_from_env("DLOCK_FAILOVER_SEED"),
        replicated: true,
        stop: AtomicBool::new(false),
        max_acked: AtomicU64::new(first_token),
        figures: Mutex::default(),
    });
    run_churn(&shared, 6, Duration::from_millis(1_500));
    let (confirmed, unconfirmed) = durable_phase(&master, &shared);
    let waiters = final_waiters(&master);

    let mut old = master.connect();
    let mut new = replica.connect();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(30_000)
        .arg("WRITE")
        .query(&mut old)
        .expect("CLIENT PAUSE");
    let offset = replication_offset(&mut old);
    wait_until("the replica to catch up", || {
        replication_offset(&mut new) >= offset
    });
    let keys: Vec<String> = (0..3)
        .flat_map(|p| {
            [
                format!("fo:churn:{p}"),
                format!("fo:handed:{p}"),
                format!("fo:solo:{p}"),
                format!("fo:quiet:{p}"),
            ]
        })
        .chain(["seed".to_string()])
        .collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let before = snapshot(&mut old, &key_refs);
    promote(&mut new);
    let port = replica.port.to_string();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&port)
        .query(&mut old)
        .expect("REPLICAOF");
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut old)
        .expect("CLIENT UNPAUSE");

    let mut violations = check_confirmed(&mut new, &confirmed, "orderly");
    violations.extend(check_confirmed(&mut new, &unconfirmed, "orderly, no WAIT"));
    let after = snapshot(&mut new, &key_refs);
    let now_ms = wall_us() / 1000;
    for (was, is) in before.iter().zip(&after) {
        // A lease that ended since may be gone; nothing else may differ.
        let ended = was.4 >= 0 && was.4 < now_ms;
        if was != is && !(ended && is.1.is_none()) {
            violations.push(format!("orderly: {} was {was:?}, is {is:?}", was.0));
        }
    }
    let (waiter_violations, outcomes) = check_waiters(waiters, "orderly");
    violations.extend(waiter_violations);

    // The demoted master follows the new one (long leases only: churn
    // leases may run out between the two snapshots).
    wait_for_info(&mut old, "replication", "master_link_status:up");
    let target = replication_offset(&mut new);
    wait_until("the demoted master to catch up", || {
        replication_offset(&mut old) >= target
    });
    let durable: Vec<&str> = key_refs
        .iter()
        .copied()
        .filter(|key| !key.starts_with("fo:churn"))
        .collect();
    let mirror = snapshot(&mut old, &durable);
    let current = snapshot(&mut new, &durable);
    if mirror != current {
        violations.push(format!(
            "the demoted master shows {mirror:?}, the new master {current:?}"
        ));
    }

    let old_max = shared.max_acked.load(Ordering::SeqCst);
    let moved = Arc::new(Shared {
        port: replica.port,
        seed: shared.seed + 1,
        replicated: true,
        stop: AtomicBool::new(false),
        max_acked: AtomicU64::new(old_max),
        figures: Mutex::default(),
    });
    run_churn(&moved, 6, Duration::from_millis(800));
    let first_new = acquire(&mut new, "fo:after", "new", 10_000).unwrap().0 as u64;
    if first_new <= old_max {
        violations.push(format!(
            "new master issued {first_new}, not above {old_max} from the old one"
        ));
    }
    report("failover (orderly), before", &shared, started, "");
    report(
        "failover (orderly), after",
        &moved,
        started,
        &format!(
            "{} WAIT-acknowledged and {} unacknowledged holds checked, {} keys compared; old master's waiters: {outcomes:?}",
            confirmed.len(),
            unconfirmed.len(),
            keys.len()
        ),
    );
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// CLIENT PAUSE WRITE is the first step of an orderly failover: once the
/// replica has caught up, nothing may change on the master. Redis itself
/// stops expiring keys for the pause, and dlock defers lease-expiry and
/// reservation-expiry hand-offs with it, but a SESSION holder that
/// disconnects during the pause is released at once by the module's timer
/// and the lock handed to the waiter. Propagating that write while clients
/// are paused trips a server assertion and the master aborts: on Redis 7.0.15
/// `server.c:3146 '!(areClientsPaused() && !server.client_pause_in_transaction)'`,
/// on Valkey 9.1.2 `server.c:3605 '!isPausedActions(PAUSE_ACTION_REPLICA) ||
/// ...'`, both from `moduleTimerHandler` -> `propagatePendingCommands`. It
/// takes a replica or the AOF (with neither, the hand-off still happens
/// during the pause).
#[test]
fn a_session_close_changes_nothing_while_writes_are_paused() {
    let master = Server::start();
    let replica = short_reservation_replica(&master);
    let mut conn = master.connect();
    let mut holder = master.connect();
    let granted = cmd(
        &mut holder,
        &["DLOCK.ACQUIRE", "paused", "holder", "30000", "SESSION"],
    )
    .unwrap();
    assert!(grant(granted).is_some());
    let waiter = spawn_command(
        &master,
        &[
            "DLOCK.ACQUIRE",
            "paused",
            "waiter",
            "30000",
            "BLOCK",
            "10000",
        ],
    );
    wait_for_waiting(&mut conn, "paused", 1);
    assert!(replicated(&mut conn));

    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5_000)
        .arg("WRITE")
        .query(&mut conn)
        .unwrap();
    let offset = replication_offset(&mut conn);
    wait_until("the replica to catch up", || {
        replication_offset(&mut replica.connect()) >= offset
    });
    drop(holder);
    // What must not happen while paused: watch for it for a while.
    std::thread::sleep(Duration::from_millis(500));
    let alive = info_field_checked(&mut conn);
    assert!(
        alive.is_some(),
        "the master died while writes were paused:\n{}",
        master
            .log()
            .lines()
            .filter(|line| line.contains("ASSERTION") || line.contains("==>"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let moved = alive.unwrap() - offset;
    let handed = waiter.is_finished();
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut conn)
        .unwrap();
    assert!(
        !handed && moved == 0,
        "while writes were paused the lock was handed over ({handed}) and the replication offset moved by {moved}"
    );
    let ((_, _, owner), _) = waiter.granted();
    assert_eq!(owner, b"waiter");
}

/// The master's replication offset, or None if it no longer answers.
fn info_field_checked(conn: &mut Connection) -> Option<i64> {
    let text: String = redis::cmd("INFO").arg("replication").query(conn).ok()?;
    text.lines()
        .find_map(|line| line.trim().strip_prefix("master_repl_offset:"))
        .and_then(|value| value.parse().ok())
}
