//! Crash consistency: a workload of acquires, re-entries, renewals and
//! releases runs on several threads while the server is killed with SIGKILL;
//! after each restart every lock must be exactly what the clients were told
//! (or what an unacknowledged in-flight command may have made of it), unless
//! its lease has legitimately ended, and the token counter must not go back.
//!
//! * AOF (`appendfsync always`): the state at the crash comes back; three
//!   crashes in a row, one of them after a BGREWRITEAOF (RDB preamble).
//! * RDB only: a SAVE, then a BGSAVE, taken while the workload runs; the
//!   state at the save comes back, not what followed it.
//!
//! Each thread owns its keys (so the clients know each key's full history)
//! and plays three owners on them, so that grants, refusals, re-entries and
//! NOTOWNER replies all happen. Leases are long (20-60 s, they survive the
//! restart) or short (30-400 ms, they end around it).
//!
//! Deadlines are compared in server milliseconds: a command sent at `s` and
//! answered at `r` sets a deadline in `[s + ttl, r + ttl]`.

use crate::common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: usize = 4;
const KEYS_PER_THREAD: usize = 5;
const OWNERS_PER_THREAD: usize = 3;

/// A token far above the wall clock in microseconds, so that tokens issued
/// after a restart are above the old ones only if the counter was persisted
/// (the clock floor cannot help).
fn seed_token() -> u64 {
    wall_us() as u64 + 1_000_000_000_000_000
}

/// A lock as the clients know it. `token` 0: unknown, above `min_token`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Known {
    owner: String,
    holds: i64,
    token: u64,
    min_token: u64,
    /// The deadline lies in `dl_lo..=dl_hi` (ms since the epoch).
    dl_lo: i64,
    dl_hi: i64,
}

impl Known {
    /// Whether the lease may have ended by `at_ms`.
    fn may_have_ended_by(&self, at_ms: i64) -> bool {
        self.dl_lo < at_ms
    }

    /// Whether the lease has certainly ended by `at_ms`.
    fn has_ended_by(&self, at_ms: i64) -> bool {
        self.dl_hi < at_ms
    }

    fn matches(&self, observed: &Observed) -> bool {
        observed.owner == self.owner
            && observed.holds == self.holds
            && if self.token == 0 {
                observed.token > self.min_token
            } else {
                observed.token == self.token
            }
            && (self.dl_lo..=self.dl_hi).contains(&observed.deadline)
    }
}

/// A lock as DLOCK.INFO and PEXPIRETIME show it after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Observed {
    owner: String,
    holds: i64,
    token: u64,
    deadline: i64,
}

/// One acknowledged change (or the start): sent and answered at these
/// instants (µs), leaving the lock in `state`.
#[derive(Clone, Debug)]
struct Entry {
    sent: i64,
    recv: i64,
    state: Option<Known>,
}

#[derive(Clone, Debug)]
struct KeyModel {
    name: String,
    history: Vec<Entry>,
}

impl KeyModel {
    fn state(&self) -> &Option<Known> {
        &self.history.last().unwrap().state
    }

    /// Starts the history again from what a restarted server shows.
    fn reset(&mut self, observed: Option<&Observed>) {
        let state = observed.map(|o| Known {
            owner: o.owner.clone(),
            holds: o.holds,
            token: o.token,
            min_token: 0,
            dl_lo: o.deadline,
            dl_hi: o.deadline,
        });
        self.history = vec![Entry {
            sent: i64::MIN,
            recv: i64::MIN,
            state,
        }];
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Acquire,
    Renew,
    Release,
}

/// A command whose reply never came (the server died under it).
#[derive(Clone, Debug)]
struct InFlight {
    key: usize,
    op: Op,
    owner: String,
    ttl: i64,
    sent: i64,
    /// The highest token acknowledged to anyone before it was sent.
    min_token: u64,
}

impl InFlight {
    /// What the lock may be after this command ran on `state`.
    fn outcomes(&self, state: &Option<Known>, crashed_ms: i64) -> Vec<Option<Known>> {
        let mut outcomes = Vec::new();
        let dl_lo = self.sent / 1000 + self.ttl;
        let dl_hi = crashed_ms + self.ttl;
        match (self.op, state) {
            (Op::Acquire, Some(held)) if held.owner == self.owner => {
                outcomes.push(Some(Known {
                    holds: held.holds + 1,
                    dl_lo,
                    dl_hi,
                    ..held.clone()
                }));
            }
            (Op::Renew, Some(held)) if held.owner == self.owner => {
                outcomes.push(Some(Known {
                    dl_lo,
                    dl_hi,
                    ..held.clone()
                }));
            }
            (Op::Release, Some(held)) if held.owner == self.owner => {
                outcomes.push((held.holds > 1).then(|| Known {
                    holds: held.holds - 1,
                    ..held.clone()
                }));
            }
            _ => {}
        }
        if self.op == Op::Acquire {
            // A new hold, if the lock was free (or its lease had ended).
            outcomes.push(Some(Known {
                owner: self.owner.clone(),
                holds: 1,
                token: 0,
                min_token: self.min_token,
                dl_lo,
                dl_hi,
            }));
        }
        outcomes
    }
}

/// What a thread's clients did in one cycle.
#[derive(Default)]
struct Outcome {
    in_flight: Option<InFlight>,
    violations: Vec<String>,
    acknowledged: u64,
    grants: u64,
    reentries: u64,
    renewals: u64,
    releases: u64,
    refusals: u64,
    notowner: u64,
}

struct Shared {
    port: u16,
    seed: u64,
    /// The highest token acknowledged to any client.
    max_acked: AtomicU64,
    stop: AtomicBool,
}

fn ttl_for(rng: &mut TestRng) -> i64 {
    if rng.percent(50) {
        rng.between(20_000, 60_000) as i64
    } else {
        rng.between(30, 400) as i64
    }
}

/// Runs commands on `keys` until the server dies or `stop` is set.
fn workload(shared: Arc<Shared>, thread: usize, cycle: u64, keys: &mut [KeyModel]) -> Outcome {
    let mut rng = TestRng::fork(shared.seed, (cycle << 8) + thread as u64);
    let mut conn = connect_port(shared.port, Duration::from_secs(20));
    let mut out = Outcome::default();
    let owners: Vec<String> = (0..OWNERS_PER_THREAD)
        .map(|o| format!("t{thread}o{o}"))
        .collect();
    while !shared.stop.load(Ordering::Relaxed) {
        let k = rng.below(keys.len() as u64) as usize;
        let state = keys[k].state().clone();
        let owner = match &state {
            Some(held) if rng.percent(60) => held.owner.clone(),
            _ => owners[rng.below(owners.len() as u64) as usize].clone(),
        };
        // Deep re-entries are mostly given back, so that locks come free.
        let deep = matches!(&state, Some(held) if held.owner == owner && held.holds >= 3);
        let op = match rng.below(100) {
            0..=34 if !deep => Op::Acquire,
            0..=54 => Op::Renew,
            _ => Op::Release,
        };
        let ttl = ttl_for(&mut rng);
        let name = keys[k].name.clone();
        let ttl_text = ttl.to_string();
        let args: Vec<&str> = match op {
            Op::Acquire => vec!["DLOCK.ACQUIRE", &name, &owner, &ttl_text],
            Op::Renew => vec!["DLOCK.RENEW", &name, &owner, &ttl_text],
            Op::Release => vec!["DLOCK.RELEASE", &name, &owner],
        };
        let min_token = shared.max_acked.load(Ordering::SeqCst);
        let sent = wall_us();
        let reply = cmd(&mut conn, &args);
        let recv = wall_us();
        let (s_ms, r_ms) = (sent / 1000, recv / 1000);
        let reply = match reply {
            Err(error) if is_broken_connection(&error) => {
                out.in_flight = Some(InFlight {
                    key: k,
                    op,
                    owner,
                    ttl,
                    sent,
                    min_token,
                });
                return out;
            }
            other => other,
        };
        out.acknowledged += 1;
        let mut problems = Vec::new();
        let mut flag = |text: String| problems.push(format!("{args:?}: {text}"));
        let new_state: Option<Known> = match (op, reply) {
            (Op::Acquire, Ok(Value::Nil)) => {
                out.refusals += 1;
                match &state {
                    Some(held) if held.owner != owner && !held.has_ended_by(s_ms) => {}
                    other => flag(format!("refused; the lock was {other:?}")),
                }
                state.clone()
            }
            (Op::Acquire, Ok(value)) => {
                let (token, holds, granted) = grant(value).unwrap();
                let token = token as u64;
                let fresh = Known {
                    owner: owner.clone(),
                    holds,
                    token,
                    min_token: 0,
                    dl_lo: s_ms + ttl,
                    dl_hi: r_ms + ttl,
                };
                if granted != owner.as_bytes() {
                    flag(format!("granted to {granted:?}"));
                }
                if holds == 1 {
                    out.grants += 1;
                    if token <= min_token {
                        flag(format!(
                            "new token {token} not above {min_token}, acknowledged before"
                        ));
                    }
                    if let Some(held) = &state {
                        if !held.may_have_ended_by(r_ms) {
                            flag(format!("new hold while {held:?} was certainly live"));
                        }
                    }
                } else {
                    out.reentries += 1;
                    match &state {
                        Some(held)
                            if held.owner == owner
                                && held.token == token
                                && held.holds + 1 == holds
                                && !held.has_ended_by(s_ms) => {}
                        other => flag(format!("re-entry {holds}/{token} of {other:?}")),
                    }
                }
                shared.max_acked.fetch_max(token, Ordering::SeqCst);
                Some(fresh)
            }
            (Op::Renew, Ok(Value::Int(token))) => {
                out.renewals += 1;
                match &state {
                    Some(held)
                        if held.owner == owner
                            && held.token == token as u64
                            && !held.has_ended_by(s_ms) =>
                    {
                        Some(Known {
                            dl_lo: s_ms + ttl,
                            dl_hi: r_ms + ttl,
                            ..held.clone()
                        })
                    }
                    other => {
                        flag(format!("renewed {token} of {other:?}"));
                        state.clone()
                    }
                }
            }
            (Op::Release, Ok(Value::Int(left))) => {
                out.releases += 1;
                match &state {
                    Some(held)
                        if held.owner == owner
                            && held.holds == left + 1
                            && !held.has_ended_by(s_ms) =>
                    {
                        (left > 0).then(|| Known {
                            holds: left,
                            ..held.clone()
                        })
                    }
                    other => {
                        flag(format!("released to {left} from {other:?}"));
                        state.clone()
                    }
                }
            }
            (Op::Renew | Op::Release, Err(error)) if error.code() == Some("NOTOWNER") => {
                out.notowner += 1;
                match &state {
                    Some(held) if held.owner == owner => {
                        if !held.may_have_ended_by(r_ms) {
                            flag(format!("NOTOWNER while {held:?} was certainly live"));
                        }
                        None
                    }
                    _ => state.clone(),
                }
            }
            (_, other) => {
                flag(format!("unexpected reply {other:?}"));
                state.clone()
            }
        };
        out.violations.append(&mut problems);
        keys[k].history.push(Entry {
            sent,
            recv,
            state: new_state,
        });
        std::thread::sleep(Duration::from_micros(rng.below(1_500)));
    }
    out
}

/// DLOCK.INFO and PEXPIRETIME of `key` after a restart (None: not held).
/// The lock at `key` as one transaction reads it: the lease may end
/// between separate reads (a key read as held, then gone).
fn observe(conn: &mut Connection, key: &str) -> Option<Observed> {
    let (reply, deadline): (Value, i64) = redis::pipe()
        .atomic()
        .cmd("DLOCK.INFO")
        .arg(key)
        .cmd("PEXPIRETIME")
        .arg(key)
        .query(conn)
        .expect("DLOCK.INFO + PEXPIRETIME");
    let fields = info_fields(reply)?;
    let field = |name: &str| {
        fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
    };
    let owner = match field("owner") {
        Value::BulkString(owner) => owner,
        Value::Nil => return None,
        other => panic!("owner field of {key}: {other:?}"),
    };
    let number = |name: &str| match field(name) {
        Value::Int(value) => value,
        other => panic!("field {name} of {key}: {other:?}"),
    };
    Some(Observed {
        owner: String::from_utf8(owner).unwrap(),
        holds: number("holds"),
        token: number("token") as u64,
        deadline,
    })
}

/// Whether `observed` is one of `candidates`, or nothing where a candidate's
/// lease may have ended by `at_ms`.
fn explained(observed: &Option<Observed>, candidates: &[Option<Known>], at_ms: i64) -> bool {
    candidates
        .iter()
        .any(|candidate| match (candidate, observed) {
            (None, None) => true,
            (Some(known), None) => known.may_have_ended_by(at_ms),
            (Some(known), Some(seen)) => known.matches(seen),
            (None, Some(_)) => false,
        })
}

#[derive(Default)]
struct Tally {
    crashes: u64,
    acknowledged: u64,
    grants: u64,
    reentries: u64,
    renewals: u64,
    releases: u64,
    refusals: u64,
    notowner: u64,
    kept: u64,
    ended: u64,
    free: u64,
    in_flight_applied: u64,
    in_flight: u64,
    violations: Vec<String>,
}

impl Tally {
    fn add(&mut self, out: Outcome) {
        self.acknowledged += out.acknowledged;
        self.grants += out.grants;
        self.reentries += out.reentries;
        self.renewals += out.renewals;
        self.releases += out.releases;
        self.refusals += out.refusals;
        self.notowner += out.notowner;
        self.violations.extend(out.violations);
    }

    fn report(&self, what: &str, started: Instant) {
        eprintln!(
            "{what}: {:.1} s, {} crashes survived; {} acknowledged commands ({} new holds, {} re-entries, {} renewals, {} releases, {} refusals, {} NOTOWNER); after restarts: {} locks kept, {} leases ended, {} free as expected; {} of {} in-flight commands had taken effect; violations: {}",
            started.elapsed().as_secs_f64(),
            self.crashes,
            self.acknowledged,
            self.grants,
            self.reentries,
            self.renewals,
            self.releases,
            self.refusals,
            self.notowner,
            self.kept,
            self.ended,
            self.free,
            self.in_flight_applied,
            self.in_flight,
            self.violations.len()
        );
        assert!(
            self.violations.is_empty(),
            "{what}: {} violations:\n{}",
            self.violations.len(),
            self.violations.join("\n")
        );
    }
}

fn new_models() -> Vec<Vec<KeyModel>> {
    (0..THREADS)
        .map(|t| {
            (0..KEYS_PER_THREAD)
                .map(|k| {
                    let mut model = KeyModel {
                        name: format!("crash:{t}:{k}"),
                        history: Vec::new(),
                    };
                    model.reset(None);
                    model
                })
                .collect()
        })
        .collect()
}

/// Runs the workload on every thread's keys until the server is killed or
/// `stop` is set, while `during` runs on the main thread.
fn run_cycle(
    shared: &Arc<Shared>,
    models: &mut [Vec<KeyModel>],
    cycle: u64,
    during: impl FnOnce(),
) -> Vec<Outcome> {
    shared.stop.store(false, Ordering::SeqCst);
    std::thread::scope(|scope| {
        let handles: Vec<_> = models
            .iter_mut()
            .enumerate()
            .map(|(thread, keys)| {
                let shared = Arc::clone(shared);
                scope.spawn(move || workload(shared, thread, cycle, keys))
            })
            .collect();
        during();
        shared.stop.store(true, Ordering::SeqCst);
        handles
            .into_iter()
            .map(|h| h.join().expect("a workload thread panicked"))
            .collect()
    })
}

/// The token a brand-new lock gets now.
fn probe_token(conn: &mut Connection, key: &str) -> u64 {
    acquire(conn, key, "probe", 60_000).expect("probe").0 as u64
}

/// Polls INFO persistence until `field` is 0 (no background job running).
fn wait_for_idle(conn: &mut Connection, field: &str) {
    wait_until(&format!("{field}:0"), || {
        info_number(conn, "persistence", field) == 0
    });
}

#[test]
fn aof_always_keeps_every_acknowledged_lock_across_sigkill() {
    let started = Instant::now();
    let seed = seed_from_env("DLOCK_CRASH_SEED");
    let mut rng = TestRng::fork(seed, 7);
    let first_token = seed_token();
    let aof = aof_with_token(first_token);
    let mut server = Server::with_files(
        &[("appendonly.aof", &aof)],
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
    );
    let shared = Arc::new(Shared {
        port: server.port,
        seed,
        max_acked: AtomicU64::new(first_token),
        stop: AtomicBool::new(false),
    });
    let mut models = new_models();
    let mut tally = Tally::default();
    for cycle in 0..5u64 {
        let run_for = Duration::from_millis(rng.between(400, 1_200));
        let outcomes = run_cycle(&shared, &mut models, cycle, || {
            let mut conn = server.connect();
            if cycle == 1 {
                // Rewrite the AOF (RDB preamble) in the middle of the work.
                let _: () = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
                wait_for_idle(&mut conn, "aof_rewrite_in_progress");
                wait_for_idle(&mut conn, "aof_rewrite_scheduled");
                assert_eq!(
                    info_field(&mut conn, "persistence", "aof_last_bgrewrite_status"),
                    "ok"
                );
            }
            std::thread::sleep(run_for);
            server.kill();
        });
        let crashed_ms = wall_us() / 1000;
        tally.crashes += 1;
        server.restart();
        let mut conn = server.connect();
        let mut highest_seen = 0;
        for (thread, outcome) in outcomes.into_iter().enumerate() {
            let in_flight = outcome.in_flight.clone();
            tally.add(outcome);
            for (k, model) in models[thread].iter_mut().enumerate() {
                let observed = observe(&mut conn, &model.name);
                let at_ms = wall_us() / 1000;
                let last = model.state().clone();
                let mut candidates = vec![last.clone()];
                if let Some(flight) = in_flight.as_ref().filter(|f| f.key == k) {
                    tally.in_flight += 1;
                    candidates.extend(flight.outcomes(&last, crashed_ms));
                    if observed.is_some()
                        && !explained(&observed, std::slice::from_ref(&last), at_ms)
                    {
                        tally.in_flight_applied += 1;
                    }
                }
                if !explained(&observed, &candidates, at_ms) {
                    tally.violations.push(format!(
                        "after crash {cycle}: {} is {observed:?}; acknowledged {last:?}, in flight {in_flight:?}",
                        model.name
                    ));
                }
                match (&last, &observed) {
                    (Some(_), Some(_)) => tally.kept += 1,
                    (Some(_), None) => tally.ended += 1,
                    _ => tally.free += 1,
                }
                if let Some(seen) = &observed {
                    highest_seen = highest_seen.max(seen.token);
                }
                model.reset(observed.as_ref());
            }
        }
        let seed_lock = observe(&mut conn, "seed").expect("the seed lock is gone");
        assert_eq!(
            (seed_lock.owner.as_str(), seed_lock.token),
            ("seeder", first_token)
        );
        let acked = shared.max_acked.load(Ordering::SeqCst);
        let next = probe_token(&mut conn, &format!("crash:probe:{cycle}"));
        if next <= acked.max(highest_seen) {
            tally.violations.push(format!(
                "after crash {cycle}: new token {next} is not above {acked} (acknowledged) and {highest_seen} (restored)"
            ));
        }
        shared.max_acked.fetch_max(next, Ordering::SeqCst);
    }
    assert!(tally.grants > 50 && tally.kept > 0, "too little happened");
    tally.report("crash (AOF always)", started);
}

/// SAVE (cycle 0) or BGSAVE (cycle 1) while the workload runs, more work,
/// then SIGKILL: the restarted server holds the state at the save.
///
/// With `seeded`, tokens run far above the clock, so a token issued after the
/// restart is above the saved ones only through the RDB's aux field. Tokens
/// acknowledged after the save are lost with the crash: then the clock floor
/// is what keeps new tokens above them (`seeded` false checks that).
fn rdb_cycles(seeded: bool) {
    let started = Instant::now();
    let seed = seed_from_env("DLOCK_CRASH_SEED");
    let mut rng = TestRng::fork(seed, 11);
    let first_token = seed_token();
    let aof = aof_with_token(first_token);
    let mut server = if seeded {
        // Load the seed from an AOF, then run on RDB alone.
        let mut server = Server::with_files(
            &[("appendonly.aof", &aof)],
            &["--appendonly", "yes", "--save", ""],
        );
        let _: () = redis::cmd("SAVE").query(&mut server.connect()).unwrap();
        server.restart_with_args(&["--appendonly", "no", "--save", ""]);
        assert!(observe(&mut server.connect(), "seed").is_some());
        server
    } else {
        Server::start()
    };
    let shared = Arc::new(Shared {
        port: server.port,
        seed,
        max_acked: AtomicU64::new(if seeded { first_token } else { 0 }),
        stop: AtomicBool::new(false),
    });
    let mut models = new_models();
    let mut tally = Tally::default();
    for cycle in 0..2u64 {
        let before = Duration::from_millis(rng.between(200, 600));
        let after = Duration::from_millis(rng.between(200, 600));
        let mut save_window = (0, 0);
        let mut acked_before_save = 0;
        let outcomes = run_cycle(&shared, &mut models, cycle, || {
            let mut conn = server.connect();
            std::thread::sleep(before);
            acked_before_save = shared.max_acked.load(Ordering::SeqCst);
            let sent = wall_us();
            let command = if cycle == 0 { "SAVE" } else { "BGSAVE" };
            let _: Value = redis::cmd(command).query(&mut conn).unwrap();
            save_window = (sent, wall_us());
            wait_for_idle(&mut conn, "rdb_bgsave_in_progress");
            assert_eq!(
                info_field(&mut conn, "persistence", "rdb_last_bgsave_status"),
                "ok"
            );
            std::thread::sleep(after);
            server.kill();
        });
        tally.crashes += 1;
        server.restart();
        let mut conn = server.connect();
        let (save_sent, save_recv) = save_window;
        let mut highest_saved = 0;
        for (thread, outcome) in outcomes.into_iter().enumerate() {
            tally.add(outcome);
            for model in models[thread].iter_mut() {
                let observed = observe(&mut conn, &model.name);
                let at_ms = wall_us() / 1000;
                // The state after the last change acknowledged before the
                // save was sent, or after the one that overlapped it.
                let settled = model
                    .history
                    .iter()
                    .rev()
                    .find(|entry| entry.recv < save_sent)
                    .expect("the history starts before the save");
                let mut candidates = vec![settled.state.clone()];
                candidates.extend(
                    model
                        .history
                        .iter()
                        .filter(|entry| entry.recv >= save_sent && entry.sent <= save_recv)
                        .map(|entry| entry.state.clone()),
                );
                if !explained(&observed, &candidates, at_ms) {
                    tally.violations.push(format!(
                        "after crash {cycle}: {} is {observed:?}; at the save it was one of {candidates:?}",
                        model.name
                    ));
                }
                match (&settled.state, &observed) {
                    (Some(_), Some(_)) => tally.kept += 1,
                    (Some(_), None) => tally.ended += 1,
                    _ => tally.free += 1,
                }
                if let Some(seen) = &observed {
                    highest_saved = highest_saved.max(seen.token);
                }
                model.reset(observed.as_ref());
            }
        }
        let next = probe_token(&mut conn, &format!("crash:probe:{cycle}"));
        let floor = if seeded {
            // Only what the file holds is protected by the counter.
            acked_before_save.max(highest_saved)
        } else {
            shared.max_acked.load(Ordering::SeqCst)
        };
        if next <= floor {
            tally.violations.push(format!(
                "after crash {cycle}: new token {next} is not above {floor}"
            ));
        }
        // Tokens the crash lost may come again (seeded): start over from here.
        shared.max_acked.store(next, Ordering::SeqCst);
    }
    assert!(tally.grants > 20 && tally.kept > 0, "too little happened");
    let what = if seeded {
        "crash (RDB, counter far above the clock)"
    } else {
        "crash (RDB, clock-floor tokens)"
    };
    tally.report(what, started);
}

#[test]
fn rdb_save_then_sigkill_restores_the_saved_locks_and_counter() {
    rdb_cycles(true);
}

#[test]
fn rdb_save_then_sigkill_never_reissues_an_acknowledged_token() {
    rdb_cycles(false);
}
