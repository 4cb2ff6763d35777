//! Concurrency checker: many clients fight over a few locks with short
//! leases, blocking and fair acquires, SESSION holds, renewals, re-entries,
//! abandoned leases and CLIENT KILLs, while every reply is logged with the
//! client-side wall-clock instants around it. Each critical section writes to
//! an in-process fenced resource that refuses tokens lower than the highest
//! it has seen. After the run the log is checked for:
//!
//! * (a) fencing tokens: every new hold has a token of its own, and a hold
//!   whose request was sent after another hold's grant reply arrived has a
//!   larger token (on any key); re-entries and renewals return the hold's
//!   token, and hold counts add up;
//! * (b) mutual exclusion: no two holds of a key are both *certainly* live at
//!   one instant. A hold is certainly live from its grant reply until the
//!   first of: its release was sent, its connection was closed or killed (for
//!   SESSION holds), or `sent + ttl` of its last acknowledged (re)acquire or
//!   renewal (the server's deadline can only be later);
//! * (c) fencing: the resource never accepts a lower token than one it saw,
//!   never sees one token from two owners, and never refuses a write made
//!   while its hold was certainly live;
//! * (d) FIFO: a monitor snapshots each key's queue (DLOCK.INFO). A blocked
//!   request seen in a snapshot while it was in flight, and later granted,
//!   must be granted before every waiter behind it and before every request
//!   sent after the snapshot by an owner not ahead of it;
//! * leases end no earlier than promised (no NOTOWNER, new token or refusal
//!   for a holder whose lease was certainly live), BLOCK returns null no
//!   earlier than its timeout and nothing hangs, every dropped connection was
//!   killed on purpose, and every lock is free once the clients stop.
//!
//! `DLOCK_STRESS_SECS` (default 10), `DLOCK_STRESS_CLIENTS` (default 32),
//! `DLOCK_STRESS_KEYS` (default 3) and `DLOCK_STRESS_SEED` tune the run:
//! `DLOCK_STRESS_SECS=300 DLOCK_STRESS_CLIENTS=64 cargo test --release
//! --workspace --test integration stress:: -- --nocapture` is the long run. `DLOCK_STRESS_AOF=1` gives
//! the server an AOF, a record of every change it made, kept with the server
//! log when the run fails.

use crate::common;

use common::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Slack for the millisecond rounding of server deadlines (µs).
const MARGIN_US: i64 = 2_000;

/// A reply later than this past what the request allows counts as a hang (µs).
const HANG_US: i64 = 10_000_000;

/// Read timeout of every worker connection: a reply that never comes fails
/// the run instead of hanging it.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// `dlock.fair-reservation-ms` during the run: reservations must not stall
/// the queues for long.
const RESERVATION_MS: u64 = 100;

#[derive(Clone, Copy, Debug)]
struct Settings {
    clients: usize,
    secs: u64,
    keys: usize,
    seed: u64,
    min_ttl: u64,
    max_ttl: u64,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            clients: env_number("DLOCK_STRESS_CLIENTS", 32) as usize,
            secs: env_number("DLOCK_STRESS_SECS", 10),
            keys: env_number("DLOCK_STRESS_KEYS", 3) as usize,
            seed: seed_from_env("DLOCK_STRESS_SEED"),
            min_ttl: 20,
            max_ttl: 200,
        }
    }
}

fn key_name(key: usize) -> String {
    format!("stress:{key}")
}

// ---------------------------------------------------------------------------
// The fenced resource.
// ---------------------------------------------------------------------------

/// A resource guarded by fencing tokens: it refuses any write whose token is
/// lower than the highest it has accepted.
#[derive(Default)]
struct Fence {
    highest: u64,
    highest_owner: String,
    accepted: u64,
    refused: u64,
    /// Broken invariants of the resource itself (a token from two owners).
    violations: Vec<String>,
}

impl Fence {
    fn offer(&mut self, token: u64, owner: &str) -> bool {
        if token < self.highest {
            self.refused += 1;
            return false;
        }
        if token == self.highest && owner != self.highest_owner {
            self.violations.push(format!(
                "token {token} written by {owner} and by {}",
                self.highest_owner
            ));
        }
        if token > self.highest {
            self.highest = token;
            self.highest_owner = owner.to_string();
        }
        self.accepted += 1;
        true
    }
}

// ---------------------------------------------------------------------------
// What the workers log.
// ---------------------------------------------------------------------------

/// An acquire-type request (ACQUIRE or FAIR, blocking or not).
#[derive(Clone, Debug)]
struct Request {
    owner: String,
    key: usize,
    block_ms: Option<u64>,
    sent: i64,
    recv: i64,
    /// `(token, holds)` when granted.
    granted: Option<(u64, u64)>,
}

/// One hold (one token) as its client saw it.
#[derive(Clone, Debug)]
struct Hold {
    key: usize,
    owner: String,
    token: u64,
    holds: u64,
    session: bool,
    conn: i64,
    /// When its grant request was sent and its reply arrived.
    sent: i64,
    recv: i64,
    /// Until when the lease is certainly live (last acknowledged refresh:
    /// sent + ttl, minus the rounding margin).
    live_until: i64,
    /// When the client gave the hold up (release or close sent), if it did.
    given_up: Option<i64>,
    /// How the client's part in it ended.
    ended: &'static str,
}

impl Hold {
    /// The instants at which this hold is certainly held, given when its
    /// connection was killed or closed (a SESSION hold ends with it).
    fn window(&self, closed_at: Option<i64>) -> (i64, i64) {
        let mut end = self.live_until;
        if let Some(at) = self.given_up {
            end = end.min(at);
        }
        if self.session {
            if let Some(at) = closed_at {
                end = end.min(at);
            }
        }
        (self.recv, end)
    }
}

#[derive(Clone, Debug)]
struct Write {
    key: usize,
    token: u64,
    at: i64,
    accepted: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    requests: u64,
    grants: u64,
    blocked_grants: u64,
    reentries: u64,
    renewals: u64,
    releases: u64,
    nulls: u64,
    block_timeouts: u64,
    reservations: u64,
    expiries_seen: u64,
    abandoned: u64,
    closed: u64,
    disconnects: u64,
    writes: u64,
    refused_writes: u64,
}

impl Counters {
    fn add(&mut self, other: &Counters) {
        self.requests += other.requests;
        self.grants += other.grants;
        self.blocked_grants += other.blocked_grants;
        self.reentries += other.reentries;
        self.renewals += other.renewals;
        self.releases += other.releases;
        self.nulls += other.nulls;
        self.block_timeouts += other.block_timeouts;
        self.reservations += other.reservations;
        self.expiries_seen += other.expiries_seen;
        self.abandoned += other.abandoned;
        self.closed += other.closed;
        self.disconnects += other.disconnects;
        self.writes += other.writes;
        self.refused_writes += other.refused_writes;
    }
}

#[derive(Default)]
struct WorkerLog {
    requests: Vec<Request>,
    holds: Vec<Hold>,
    writes: Vec<Write>,
    /// Connections that broke under this worker: (client id, when noticed).
    disconnects: Vec<(i64, i64)>,
    /// Connections this worker closed: (client id, just before closing). Every
    /// SESSION hold on them ends, abandoned ones included.
    closes: Vec<(i64, i64)>,
    violations: Vec<String>,
    counters: Counters,
}

/// What a queue looked like: DLOCK.INFO sent at `s0`, reply at `s1`.
#[derive(Clone, Debug)]
struct Snapshot {
    key: usize,
    s0: i64,
    s1: i64,
    queue: Vec<String>,
}

// ---------------------------------------------------------------------------
// Workers.
// ---------------------------------------------------------------------------

struct Shared {
    port: u16,
    settings: Settings,
    stop: AtomicBool,
    fences: Vec<Mutex<Fence>>,
    /// The live connection id of each worker (0: none), for the killer.
    conn_ids: Vec<AtomicI64>,
    generation: AtomicU64,
}

/// A reply, classified.
enum Reply {
    Value(Value),
    NotOwner,
    /// The connection broke (killed): the command may or may not have run.
    Broken,
    /// Anything else: an error reply or a read timeout.
    Failed(String),
}

struct Worker {
    index: usize,
    shared: Arc<Shared>,
    rng: TestRng,
    conn: Connection,
    conn_id: i64,
    /// Bumped on every reconnect and abandoned hold, so that a new hold is
    /// never a re-entry of a hold the client has forgotten.
    generation: u64,
    /// The last command timed out: its connection is dropped, not broken.
    timed_out: bool,
    log: WorkerLog,
}

impl Worker {
    fn new(index: usize, shared: Arc<Shared>) -> Worker {
        let rng = TestRng::fork(shared.settings.seed, index as u64 + 1);
        let mut conn = connect_port(shared.port, READ_TIMEOUT);
        let conn_id = client_id_of(&mut conn);
        shared.conn_ids[index].store(conn_id, Ordering::SeqCst);
        let generation = shared.generation.fetch_add(1, Ordering::Relaxed);
        Worker {
            index,
            shared,
            rng,
            conn,
            conn_id,
            generation,
            timed_out: false,
            log: WorkerLog::default(),
        }
    }

    fn owner(&self) -> String {
        format!("w{}.{}", self.index, self.generation)
    }

    /// The owner for non-blocking FAIR calls: its queue entries are the
    /// reservations, so every plain owner in a queue is a blocked waiter.
    fn reserving_owner(&self) -> String {
        format!("w{}.{}r", self.index, self.generation)
    }

    fn violation(&mut self, text: String) {
        self.log
            .violations
            .push(format!("worker {}: {text}", self.index));
    }

    fn fresh_generation(&mut self) {
        self.generation = self.shared.generation.fetch_add(1, Ordering::Relaxed);
    }

    fn reconnect(&mut self) {
        self.shared.conn_ids[self.index].store(0, Ordering::SeqCst);
        let mut conn = loop {
            let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.shared.port))
                .expect("client");
            match client.get_connection_with_timeout(Duration::from_secs(5)) {
                Ok(conn) => break conn,
                Err(error) => {
                    self.violation(format!("cannot reconnect: {error}"));
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        conn.set_read_timeout(Some(READ_TIMEOUT))
            .expect("read timeout");
        self.conn_id = client_id_of(&mut conn);
        self.conn = conn;
        self.shared.conn_ids[self.index].store(self.conn_id, Ordering::SeqCst);
        self.fresh_generation();
    }

    /// The connection broke under a command (or its reply never came): note
    /// it and start over.
    fn lost_connection(&mut self) {
        if std::mem::take(&mut self.timed_out) {
            // Dropped by this client: SESSION holds on it end now.
            self.log.closes.push((self.conn_id, wall_us()));
            self.reconnect();
            return;
        }
        self.log.counters.disconnects += 1;
        self.log.disconnects.push((self.conn_id, wall_us()));
        self.reconnect();
    }

    /// Sends a command; returns the classified reply and the instants just
    /// before sending and just after the reply.
    fn send(&mut self, args: &[String]) -> (Reply, i64, i64) {
        let strs: Vec<&str> = args.iter().map(String::as_str).collect();
        let sent = wall_us();
        let result = cmd(&mut self.conn, &strs);
        let recv = wall_us();
        let reply = match result {
            Ok(value) => Reply::Value(value),
            Err(error) if error.code() == Some("NOTOWNER") => Reply::NotOwner,
            Err(error) if is_broken_connection(&error) => Reply::Broken,
            Err(error) if error.is_timeout() => {
                // A reply that never came (the violation is flagged below):
                // a late one would answer the next command, so the
                // connection is dropped.
                self.timed_out = true;
                Reply::Broken
            }
            Err(error) => Reply::Failed(format!("{args:?}: {error}")),
        };
        let allowed = match args_block_ms(args) {
            // BLOCK 0 waits for as long as it takes; the read timeout bounds it.
            Some(0) => i64::MAX,
            Some(ms) => HANG_US + 1_000 * ms as i64,
            None => HANG_US,
        };
        if self.timed_out {
            self.violation(format!(
                "{args:?}: no reply within {} s",
                READ_TIMEOUT.as_secs()
            ));
        } else if recv - sent > allowed {
            self.violation(format!(
                "{args:?} took {} ms to reply",
                (recv - sent) / 1000
            ));
        }
        (reply, sent, recv)
    }

    fn ttl(&mut self) -> u64 {
        let settings = self.shared.settings;
        self.rng.between(settings.min_ttl, settings.max_ttl)
    }

    fn run(mut self) -> WorkerLog {
        while !self.shared.stop.load(Ordering::Relaxed) {
            let key = self.rng.below(self.shared.settings.keys as u64) as usize;
            self.try_to_hold(key);
        }
        self.shared.conn_ids[self.index].store(0, Ordering::SeqCst);
        // Dropping the connection ends its SESSION holds, abandoned ones too.
        self.log.closes.push((self.conn_id, wall_us()));
        self.log
    }

    /// One attempt to take `key` in a random way, and a critical section if
    /// it is granted.
    fn try_to_hold(&mut self, key: usize) {
        let blocking = self.rng.percent(55);
        let fair = self.rng.percent(45);
        let session = self.rng.percent(30);
        let ttl = self.ttl();
        let block_ms = blocking.then(|| {
            if self.rng.percent(3) {
                0
            } else {
                self.rng.between(10, 400)
            }
        });
        let owner = if fair && !blocking {
            self.reserving_owner()
        } else {
            self.owner()
        };
        let mut args = vec![
            if fair { "DLOCK.FAIR" } else { "DLOCK.ACQUIRE" }.to_string(),
            key_name(key),
            owner.clone(),
            ttl.to_string(),
        ];
        if let Some(ms) = block_ms {
            args.extend(["BLOCK".to_string(), ms.to_string()]);
        }
        if session {
            args.push("SESSION".to_string());
        }
        // A non-blocking FAIR call that is refused keeps a reservation; the
        // client calls again a few times to claim it.
        let attempts = if fair && !blocking {
            self.rng.between(1, 6)
        } else {
            1
        };
        for attempt in 0..attempts {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(self.rng.between(1, 30)));
            }
            self.log.counters.requests += 1;
            let (reply, sent, recv) = self.send(&args);
            let mut request = Request {
                owner: owner.clone(),
                key,
                block_ms,
                sent,
                recv,
                granted: None,
            };
            match reply {
                Reply::Value(Value::Nil) => {
                    self.log.requests.push(request);
                    self.log.counters.nulls += 1;
                    if let Some(ms) = block_ms {
                        self.log.counters.block_timeouts += 1;
                        if ms == 0 || recv - sent < 1_000 * ms as i64 - MARGIN_US {
                            self.violation(format!(
                                "{args:?} returned null after {} µs, before its timeout",
                                recv - sent
                            ));
                        }
                    } else if fair {
                        self.log.counters.reservations += 1;
                    }
                }
                Reply::Value(value) => {
                    let Some((token, holds)) = self.parse_grant(&args, value) else {
                        self.log.requests.push(request);
                        return;
                    };
                    request.granted = Some((token, holds));
                    self.log.requests.push(request);
                    if holds != 1 {
                        self.violation(format!(
                            "{args:?} was a re-entry (holds {holds}) of a hold this owner never had"
                        ));
                        return;
                    }
                    let blocked = block_ms.is_some() && recv - sent > 2_000;
                    self.log.counters.grants += 1;
                    if blocked {
                        self.log.counters.blocked_grants += 1;
                    }
                    let hold = Hold {
                        key,
                        owner: owner.clone(),
                        token,
                        holds: 1,
                        session,
                        conn: self.conn_id,
                        sent,
                        recv,
                        live_until: sent + 1_000 * ttl as i64 - MARGIN_US,
                        given_up: None,
                        ended: "",
                    };
                    self.critical_section(hold, ttl, blocked);
                    return;
                }
                Reply::Broken => {
                    self.log.requests.push(request);
                    self.lost_connection();
                    return;
                }
                Reply::NotOwner => {
                    self.log.requests.push(request);
                    self.violation(format!("{args:?} replied NOTOWNER"));
                    return;
                }
                Reply::Failed(text) => {
                    self.log.requests.push(request);
                    self.violation(text);
                    return;
                }
            }
        }
    }

    fn parse_grant(&mut self, args: &[String], value: Value) -> Option<(u64, u64)> {
        match value {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(token), Value::Int(holds), Value::BulkString(owner)]
                    if *owner == args[2].as_bytes() && *token > 0 && *holds > 0 =>
                {
                    Some((*token as u64, *holds as u64))
                }
                other => {
                    self.violation(format!("{args:?}: bad grant reply {other:?}"));
                    None
                }
            },
            other => {
                self.violation(format!("{args:?}: bad reply {other:?}"));
                None
            }
        }
    }

    /// Sleeps for a random time, now and then longer than the lease.
    fn work_for_a_while(&mut self, ttl: u64) {
        let ms = match self.rng.below(100) {
            0..=69 => self.rng.between(0, 2),
            70..=89 => self.rng.between(3, 25),
            _ => self.rng.between(ttl / 2, ttl * 3 / 2),
        };
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }

    /// Writes to the key's fenced resource under `hold`'s token.
    fn write(&mut self, hold: &Hold) {
        let mut fence = self.shared.fences[hold.key].lock().unwrap();
        let at = wall_us();
        let accepted = fence.offer(hold.token, &hold.owner);
        drop(fence);
        self.log.counters.writes += 1;
        if !accepted {
            self.log.counters.refused_writes += 1;
        }
        self.log.writes.push(Write {
            key: hold.key,
            token: hold.token,
            at,
            accepted,
        });
    }

    /// The server says `hold` has ended (NOTOWNER, or a refusal or new token
    /// for its holder) in a reply that arrived at `recv`: the server decided
    /// at some instant before that, so only a reply that came before the
    /// lease could end proves it ended early.
    fn ended_by_server(&mut self, hold: &Hold, recv: i64, what: &str) {
        self.log.counters.expiries_seen += 1;
        if recv < hold.live_until {
            self.violation(format!(
                "{what}: {} lost {} (token {}) {} µs before its lease could end",
                hold.owner,
                key_name(hold.key),
                hold.token,
                hold.live_until - recv
            ));
        }
    }

    fn critical_section(&mut self, mut hold: Hold, mut ttl: u64, waited: bool) {
        if waited && self.rng.percent(60) {
            // The lease of a hold granted after waiting started at an unknown
            // instant: renewing it pins down how long it certainly lasts.
            ttl = self.ttl();
            match self.renew(&mut hold, ttl) {
                Step::Holding => {}
                Step::Ended => {
                    self.keep(hold, "the server ended it (renewal)");
                    self.fresh_generation();
                    return;
                }
                Step::Broken => {
                    self.keep(hold, "its connection broke (renewal)");
                    self.lost_connection();
                    return;
                }
            }
        }
        let steps = self.rng.between(1, 3);
        for _ in 0..steps {
            self.work_for_a_while(ttl);
            self.write(&hold);
            let step = self.rng.below(100);
            let outcome = if step < 25 {
                ttl = self.ttl();
                self.renew(&mut hold, ttl)
            } else if step < 45 {
                ttl = self.ttl();
                self.reenter(&mut hold, ttl)
            } else {
                Step::Holding
            };
            match outcome {
                Step::Holding => {}
                Step::Ended => {
                    self.keep(hold, "the server ended it");
                    // A refused FAIR re-entry leaves a reservation behind:
                    // this owner name is not used again.
                    self.fresh_generation();
                    return;
                }
                Step::Broken => {
                    self.keep(hold, "its connection broke");
                    self.lost_connection();
                    return;
                }
            }
        }
        let finish = self.rng.below(100);
        if finish < 8 {
            // Walk away: the lease ends by itself.
            self.log.counters.abandoned += 1;
            self.keep(hold, "abandoned");
            self.fresh_generation();
        } else if finish < 20 && hold.session {
            // Close the connection: a SESSION hold is released with it.
            self.log.counters.closed += 1;
            let at = wall_us();
            hold.given_up = Some(at);
            self.keep(hold, "its connection was closed");
            self.log.closes.push((self.conn_id, at));
            self.shared.conn_ids[self.index].store(0, Ordering::SeqCst);
            let replacement = connect_port(self.shared.port, READ_TIMEOUT);
            drop(std::mem::replace(&mut self.conn, replacement));
            self.conn_id = client_id_of(&mut self.conn);
            self.shared.conn_ids[self.index].store(self.conn_id, Ordering::SeqCst);
            self.fresh_generation();
        } else {
            self.release_all(hold);
        }
    }

    fn renew(&mut self, hold: &mut Hold, ttl: u64) -> Step {
        let args = vec![
            "DLOCK.RENEW".to_string(),
            key_name(hold.key),
            hold.owner.clone(),
            ttl.to_string(),
        ];
        let (reply, sent, recv) = self.send(&args);
        match reply {
            Reply::Value(Value::Int(token)) if token as u64 == hold.token => {
                self.log.counters.renewals += 1;
                hold.live_until = sent + 1_000 * ttl as i64 - MARGIN_US;
                Step::Holding
            }
            Reply::NotOwner => {
                self.ended_by_server(hold, recv, "RENEW replied NOTOWNER");
                Step::Ended
            }
            Reply::Broken => {
                // It may have run: the lease may now end at sent + ttl.
                hold.live_until = hold.live_until.min(sent + 1_000 * ttl as i64 - MARGIN_US);
                Step::Broken
            }
            Reply::Value(other) => {
                self.violation(format!("{args:?} replied {other:?}, not {}", hold.token));
                Step::Ended
            }
            Reply::Failed(text) => {
                self.violation(text);
                Step::Ended
            }
        }
    }

    /// Acquires again as the holder: a re-entry (same token, holds + 1),
    /// unless the lease has ended.
    fn reenter(&mut self, hold: &mut Hold, ttl: u64) -> Step {
        let mut args = vec![
            if self.rng.percent(50) {
                "DLOCK.ACQUIRE"
            } else {
                "DLOCK.FAIR"
            }
            .to_string(),
            key_name(hold.key),
            hold.owner.clone(),
            ttl.to_string(),
        ];
        let block_ms = self.rng.percent(30).then(|| self.rng.between(10, 200));
        if let Some(ms) = block_ms {
            args.extend(["BLOCK".to_string(), ms.to_string()]);
        }
        if hold.session {
            args.push("SESSION".to_string());
        }
        self.log.counters.requests += 1;
        let (reply, sent, recv) = self.send(&args);
        let mut request = Request {
            owner: hold.owner.clone(),
            key: hold.key,
            block_ms,
            sent,
            recv,
            granted: None,
        };
        let step = match reply {
            Reply::Value(Value::Nil) => {
                self.ended_by_server(hold, recv, "re-entry refused");
                Step::Ended
            }
            Reply::Value(value) => match self.parse_grant(&args, value) {
                Some((token, holds)) => {
                    request.granted = Some((token, holds));
                    if token == hold.token && holds == hold.holds + 1 {
                        self.log.counters.reentries += 1;
                        hold.holds = holds;
                        hold.live_until = sent + 1_000 * ttl as i64 - MARGIN_US;
                        Step::Holding
                    } else if holds == 1 && token != hold.token {
                        // The lease had ended: this is a new hold.
                        self.ended_by_server(hold, recv, "re-entry gave a new token");
                        self.log.counters.grants += 1;
                        let old = std::mem::replace(
                            hold,
                            Hold {
                                key: hold.key,
                                owner: hold.owner.clone(),
                                token,
                                holds: 1,
                                session: hold.session,
                                conn: self.conn_id,
                                sent,
                                recv,
                                live_until: sent + 1_000 * ttl as i64 - MARGIN_US,
                                given_up: None,
                                ended: "",
                            },
                        );
                        self.keep(old, "its lease ran out (a re-entry got a new token)");
                        Step::Holding
                    } else {
                        self.violation(format!(
                            "{args:?} by the holder of token {} (holds {}) replied token {token} holds {holds}",
                            hold.token, hold.holds
                        ));
                        Step::Ended
                    }
                }
                None => Step::Ended,
            },
            Reply::Broken => {
                hold.live_until = hold.live_until.min(sent + 1_000 * ttl as i64 - MARGIN_US);
                Step::Broken
            }
            Reply::NotOwner => {
                self.violation(format!("{args:?} replied NOTOWNER"));
                Step::Ended
            }
            Reply::Failed(text) => {
                self.violation(text);
                Step::Ended
            }
        };
        self.log.requests.push(request);
        step
    }

    fn release_all(&mut self, mut hold: Hold) {
        while hold.holds > 0 {
            let args = vec![
                "DLOCK.RELEASE".to_string(),
                key_name(hold.key),
                hold.owner.clone(),
            ];
            let (reply, sent, recv) = self.send(&args);
            match reply {
                Reply::Value(Value::Int(left)) if left as u64 == hold.holds - 1 => {
                    self.log.counters.releases += 1;
                    hold.holds -= 1;
                    if hold.holds == 0 {
                        hold.given_up = Some(sent);
                    }
                }
                Reply::NotOwner => {
                    self.ended_by_server(&hold, recv, "RELEASE replied NOTOWNER");
                    break;
                }
                Reply::Broken => {
                    hold.given_up = Some(sent);
                    self.keep(hold, "its connection broke (release)");
                    self.lost_connection();
                    return;
                }
                Reply::Value(other) => {
                    self.violation(format!(
                        "{args:?} with {} holds replied {other:?}",
                        hold.holds
                    ));
                    break;
                }
                Reply::Failed(text) => {
                    self.violation(text);
                    break;
                }
            }
        }
        let how = if hold.holds == 0 {
            "released"
        } else {
            "release failed"
        };
        self.keep(hold, how);
    }

    fn keep(&mut self, mut hold: Hold, how: &'static str) {
        hold.ended = how;
        self.log.holds.push(hold);
    }
}

enum Step {
    Holding,
    Ended,
    Broken,
}

/// The BLOCK timeout in `args`, if any.
fn args_block_ms(args: &[String]) -> Option<u64> {
    args.iter()
        .position(|a| a == "BLOCK")
        .and_then(|i| args.get(i + 1))
        .and_then(|ms| ms.parse().ok())
}

// ---------------------------------------------------------------------------
// The killer and the monitor.
// ---------------------------------------------------------------------------

/// Kills a random worker's connection now and then; returns (client id,
/// instant just before the kill was sent) for each kill that hit.
fn killer(shared: Arc<Shared>) -> Vec<(i64, i64)> {
    let mut rng = TestRng::fork(shared.settings.seed, 0);
    let mut conn = connect_port(shared.port, READ_TIMEOUT);
    let mut kills = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(rng.between(20, 150)));
        let victim = rng.below(shared.conn_ids.len() as u64) as usize;
        let id = shared.conn_ids[victim].load(Ordering::SeqCst);
        if id == 0 {
            continue;
        }
        let at = wall_us();
        let killed = int(&mut conn, &["CLIENT", "KILL", "ID", &id.to_string()]);
        if killed == 1 {
            kills.push((id, at));
        }
    }
    kills
}

/// Snapshots the queue of every key until told to stop.
fn monitor(shared: Arc<Shared>) -> Vec<Snapshot> {
    let mut conn = connect_port(shared.port, READ_TIMEOUT);
    let mut snapshots = Vec::new();
    // Only a changed queue is kept: a repeated one adds no ordering.
    let mut last: Vec<Vec<String>> = vec![Vec::new(); shared.settings.keys];
    while !shared.stop.load(Ordering::Relaxed) {
        for (key, seen) in last.iter_mut().enumerate() {
            let s0 = wall_us();
            let queue = queue(&mut conn, &key_name(key));
            let s1 = wall_us();
            if queue.is_empty() {
                seen.clear();
            } else if queue != *seen {
                seen.clone_from(&queue);
                snapshots.push(Snapshot { key, s0, s1, queue });
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    snapshots
}

// ---------------------------------------------------------------------------
// The checks.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Findings {
    violations: Vec<String>,
    pairs_ordered: u64,
    windows_checked: u64,
    fifo_checks: u64,
}

impl Findings {
    fn flag(&mut self, text: String) {
        if self.violations.len() < 200 {
            self.violations.push(text);
        }
    }
}

fn check(
    logs: &[WorkerLog],
    kills: &[(i64, i64)],
    snapshots: &[Snapshot],
    keys: usize,
) -> Findings {
    let mut findings = Findings::default();
    for log in logs {
        for text in &log.violations {
            findings.flag(text.clone());
        }
    }
    let killed_at: HashMap<i64, i64> = kills.iter().copied().collect();
    // When each connection was killed or closed, whichever came first.
    let mut closed_at = killed_at.clone();
    for (conn, at) in logs.iter().flat_map(|log| &log.closes) {
        let first = closed_at.entry(*conn).or_insert(*at);
        *first = (*first).min(*at);
    }
    for log in logs {
        for (conn, at) in &log.disconnects {
            match killed_at.get(conn) {
                Some(kill) if *kill <= *at => {}
                _ => findings.flag(format!(
                    "connection {conn} broke at {at} but was never killed"
                )),
            }
        }
    }
    let holds: Vec<&Hold> = logs.iter().flat_map(|log| &log.holds).collect();
    let broke_at: HashMap<i64, i64> = logs
        .iter()
        .flat_map(|log| log.disconnects.iter().copied())
        .collect();

    // (a) Every new hold has a token of its own.
    let mut by_token: HashMap<u64, &Hold> = HashMap::new();
    for hold in &holds {
        if let Some(other) = by_token.insert(hold.token, hold) {
            findings.flag(format!(
                "token {} granted twice: {} on {} and {} on {}",
                hold.token,
                other.owner,
                key_name(other.key),
                hold.owner,
                key_name(hold.key)
            ));
        }
    }

    // (a) A hold requested after another's grant reply has a larger token.
    let mut by_recv: Vec<&Hold> = holds.clone();
    by_recv.sort_by_key(|hold| hold.recv);
    let mut by_sent: Vec<&Hold> = holds.clone();
    by_sent.sort_by_key(|hold| hold.sent);
    let mut next = 0;
    let mut highest: Option<&Hold> = None;
    for hold in &by_sent {
        while next < by_recv.len() && by_recv[next].recv < hold.sent {
            if highest.is_none_or(|h| by_recv[next].token > h.token) {
                highest = Some(by_recv[next]);
            }
            next += 1;
        }
        if let Some(earlier) = highest {
            findings.pairs_ordered += 1;
            if earlier.token >= hold.token {
                findings.flag(format!(
                    "token order: {} got {} on {} after {} had received {} on {}",
                    hold.owner,
                    hold.token,
                    key_name(hold.key),
                    earlier.owner,
                    earlier.token,
                    key_name(earlier.key)
                ));
            }
        }
    }

    // (b) No two holds of a key are certainly live at the same instant.
    for key in 0..keys {
        let mut windows: Vec<(i64, i64, &Hold)> = holds
            .iter()
            .filter(|hold| hold.key == key)
            .map(|hold| {
                let (start, end) = hold.window(closed_at.get(&hold.conn).copied());
                (start, end, *hold)
            })
            .filter(|(start, end, _)| start < end)
            .collect();
        windows.sort_by_key(|(start, _, _)| *start);
        let mut latest: Option<(i64, &Hold)> = None;
        for (start, end, hold) in windows {
            findings.windows_checked += 1;
            if let Some((until, other)) = latest {
                if start < until {
                    findings.flag(format!(
                        "two holders of {}: {} (token {}, certainly live until {until}) and {} (token {}, granted by {start}, {} µs earlier); {:?} closed at {:?}, broke at {:?}; {:?} closed at {:?}",
                        key_name(key),
                        other.owner,
                        other.token,
                        hold.owner,
                        hold.token,
                        until - start,
                        other,
                        closed_at.get(&other.conn),
                        broke_at.get(&other.conn),
                        hold,
                        closed_at.get(&hold.conn),
                    ));
                }
            }
            if latest.is_none_or(|(until, _)| end > until) {
                latest = Some((end, hold));
            }
        }
    }

    // (c) The resource refused no write made while its hold was certainly live.
    let by_key_token: HashMap<(usize, u64), &Hold> = holds
        .iter()
        .map(|hold| ((hold.key, hold.token), *hold))
        .collect();
    for write in logs.iter().flat_map(|log| &log.writes) {
        if write.accepted {
            continue;
        }
        let Some(hold) = by_key_token.get(&(write.key, write.token)) else {
            findings.flag(format!("a write under unknown token {}", write.token));
            continue;
        };
        let (start, end) = hold.window(closed_at.get(&hold.conn).copied());
        if start <= write.at && write.at < end {
            findings.flag(format!(
                "the fence refused {} (token {}) on {} {} µs before its lease could end",
                hold.owner,
                hold.token,
                key_name(hold.key),
                end - write.at
            ));
        }
    }

    // (d) FIFO: queued waiters are granted in queue order, and nobody who
    // came later passes them.
    let requests: Vec<&Request> = logs.iter().flat_map(|log| &log.requests).collect();
    let mut by_owner_key: HashMap<(&str, usize), Vec<&Request>> = HashMap::new();
    for request in &requests {
        by_owner_key
            .entry((request.owner.as_str(), request.key))
            .or_default()
            .push(request);
    }
    let mut new_holds_by_sent: Vec<Vec<&Request>> = vec![Vec::new(); keys];
    for request in &requests {
        if matches!(request.granted, Some((_, 1))) {
            new_holds_by_sent[request.key].push(request);
        }
    }
    for list in &mut new_holds_by_sent {
        list.sort_by_key(|request| request.sent);
    }
    for snapshot in snapshots {
        // The blocked request behind each queue entry, when it is certain.
        let waiting: Vec<Option<&Request>> = snapshot
            .queue
            .iter()
            .map(|owner| {
                by_owner_key
                    .get(&(owner.as_str(), snapshot.key))
                    .and_then(|list| {
                        list.iter().copied().find(|r| {
                            r.block_ms.is_some() && r.sent < snapshot.s0 && r.recv > snapshot.s1
                        })
                    })
            })
            .collect();
        for (i, ahead) in waiting.iter().enumerate() {
            let Some(ahead) = ahead else { continue };
            let Some((token, 1)) = ahead.granted else {
                continue;
            };
            for behind in waiting[i + 1..].iter().flatten() {
                if let Some((later, 1)) = behind.granted {
                    findings.fifo_checks += 1;
                    if later < token {
                        findings.flag(format!(
                            "FIFO: {} was granted {later} before {} ({token}), which was ahead of it in the queue of {}",
                            behind.owner, ahead.owner, key_name(snapshot.key)
                        ));
                    }
                }
            }
            let list = &new_holds_by_sent[snapshot.key];
            let from = list.partition_point(|r| r.sent <= snapshot.s1);
            for later in &list[from..] {
                if later.sent >= ahead.recv {
                    break;
                }
                let Some((later_token, _)) = later.granted else {
                    continue;
                };
                findings.fifo_checks += 1;
                let was_ahead = snapshot.queue[..i].contains(&later.owner);
                if later_token < token && !was_ahead {
                    findings.flag(format!(
                        "FIFO: {} barged in on {}: granted {later_token} after a snapshot showed {} queued, which got {token}",
                        later.owner,
                        key_name(snapshot.key),
                        ahead.owner
                    ));
                }
            }
        }
    }
    findings
}

// ---------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------

#[test]
fn concurrent_clients_never_break_exclusion_fencing_or_fifo() {
    let settings = Settings::from_env();
    eprintln!(
        "stress: {} clients, {} s, {} keys, seed {} (DLOCK_STRESS_SEED to replay)",
        settings.clients, settings.secs, settings.keys, settings.seed
    );
    // DLOCK_STRESS_AOF=1 keeps every change the server made in its AOF,
    // for post-mortems (the directory is kept when the test fails).
    let server = if env_number("DLOCK_STRESS_AOF", 0) == 1 {
        Server::with_args(&["--save", "", "--appendonly", "yes"])
    } else {
        Server::start()
    };
    let mut conn = server.connect();
    config_set(
        &mut conn,
        "dlock.fair-reservation-ms",
        &RESERVATION_MS.to_string(),
    );
    let shared = Arc::new(Shared {
        port: server.port,
        settings,
        stop: AtomicBool::new(false),
        fences: (0..settings.keys).map(|_| Mutex::default()).collect(),
        conn_ids: (0..settings.clients).map(|_| AtomicI64::new(0)).collect(),
        generation: AtomicU64::new(0),
    });
    let started = Instant::now();
    let workers: Vec<_> = (0..settings.clients)
        .map(|index| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || Worker::new(index, shared).run())
        })
        .collect();
    let killer = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || killer(shared))
    };
    let monitor = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || monitor(shared))
    };
    while started.elapsed() < Duration::from_secs(settings.secs) {
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            workers.iter().all(|w| !w.is_finished()),
            "a worker stopped early (panicked?)"
        );
    }
    shared.stop.store(true, Ordering::Relaxed);
    let logs: Vec<WorkerLog> = workers
        .into_iter()
        .map(|w| w.join().expect("a worker panicked"))
        .collect();
    let kills = killer.join().expect("the killer panicked");
    let snapshots = monitor.join().expect("the monitor panicked");
    let ran_for = started.elapsed();

    // Every lock ends up free: leases end and nobody is left waiting.
    for key in 0..settings.keys {
        wait_until(&format!("{} to be free", key_name(key)), || {
            int(&mut conn, &["EXISTS", &key_name(key)]) == 0
        });
    }
    wait_for_blocked_clients(&mut conn, 0);

    let findings = check(&logs, &kills, &snapshots, settings.keys);
    let mut counters = Counters::default();
    for log in &logs {
        counters.add(&log.counters);
    }
    let mut fence_violations = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for fence in &shared.fences {
        let fence = fence.lock().unwrap();
        accepted += fence.accepted;
        refused += fence.refused;
        fence_violations.extend(fence.violations.iter().cloned());
    }
    let server_figure = |conn: &mut Connection, name: &str| info_number(conn, "dlock", name);
    eprintln!(
        "stress: ran {:.1} s; {} requests, {} new holds ({} after waiting), {} re-entries, {} renewals, {} releases, {} nulls ({} BLOCK timeouts, {} FAIR reservations)",
        ran_for.as_secs_f64(),
        counters.requests,
        counters.grants,
        counters.blocked_grants,
        counters.reentries,
        counters.renewals,
        counters.releases,
        counters.nulls,
        counters.block_timeouts,
        counters.reservations
    );
    eprintln!(
        "stress: expiries seen by clients {}, abandoned leases {}, SESSION connections closed {}, kills {}, broken connections {}",
        counters.expiries_seen,
        counters.abandoned,
        counters.closed,
        kills.len(),
        counters.disconnects
    );
    eprintln!(
        "stress: server: acquires {}, hand-offs {}, lease expiries {}, block timeouts {}, releases {}",
        server_figure(&mut conn, "dlock_acquires"),
        server_figure(&mut conn, "dlock_handoffs"),
        server_figure(&mut conn, "dlock_lease_expiries"),
        server_figure(&mut conn, "dlock_block_timeouts"),
        server_figure(&mut conn, "dlock_releases")
    );
    eprintln!(
        "stress: fenced writes accepted {accepted}, refused {refused} (stale holders); checked {} token orderings, {} hold windows, {} FIFO orderings from {} queue snapshots",
        findings.pairs_ordered,
        findings.windows_checked,
        findings.fifo_checks,
        snapshots.len()
    );
    let violations: Vec<String> = findings
        .violations
        .into_iter()
        .chain(fence_violations)
        .collect();
    eprintln!("stress: violations: {}", violations.len());
    assert!(
        violations.is_empty(),
        "{} violations (seed {}):\n{}",
        violations.len(),
        settings.seed,
        violations.join("\n")
    );
    assert!(counters.grants >= 100, "too little progress: {counters:?}");
    assert!(counters.blocked_grants > 0, "no hand-offs: {counters:?}");
    assert!(counters.expiries_seen > 0, "no lease ran out: {counters:?}");
    assert!(!kills.is_empty(), "no connection was killed");
    assert!(findings.fifo_checks > 0, "no FIFO ordering was checked");
}

/// A waiter whose BLOCK timeout ends as the lease it waits for runs out is
/// either granted or refused, and always told so. (Redis 7.0 drops the reply
/// of a module client unblocked in the event-loop turn its timeout runs in:
/// before the module passed over waiters that close to their timeout, about
/// one try in five was granted the lock in silence and hung.)
#[test]
fn waiter_granted_as_its_block_timeout_ends_gets_a_reply() {
    let server = Server::start();
    let mut conn = server.connect();
    let mut silent = Vec::new();
    for i in 0..40 {
        let key = format!("race:{i}");
        acquire(&mut conn, &key, "holder", 30).unwrap();
        let pending = spawn_command(
            &server,
            &["DLOCK.ACQUIRE", &key, "waiter", "5000", "BLOCK", "30"],
        );
        let deadline = Instant::now() + Duration::from_secs(2);
        while !pending.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !pending.is_finished() {
            silent.push(format!("{key}: {:?}", info(&mut conn, &key)));
            int(
                &mut conn,
                &["CLIENT", "KILL", "ID", &pending.id.to_string()],
            );
        }
        let _ = pending.join();
    }
    assert!(
        silent.is_empty(),
        "{} of 40 waiters never got a reply:\n{}",
        silent.len(),
        silent.join("\n")
    );
}

/// A waiter of the deterministic FIFO test.
struct Queued {
    owner: String,
    pending: Pending,
    /// Leaves the queue by its own short timeout.
    short_timeout: bool,
}

/// Queues of a dozen waiters (ACQUIRE/FAIR BLOCK, some SESSION) under churn
/// (waiters killed, timing out, a FAIR reservation running out), then handed
/// on by releases or by lease expiry: the grants follow the queue exactly.
#[test]
fn waiters_are_granted_in_queue_order_under_churn() {
    let seed = seed_from_env("DLOCK_STRESS_SEED");
    let mut rng = TestRng::fork(seed, 1_000_000);
    let server = Server::start();
    let mut conn = server.connect();
    config_set(&mut conn, "dlock.fair-reservation-ms", "300");
    for round in 0..4 {
        let key = format!("fifo:{round}");
        let (first, _, _) = acquire(&mut conn, &key, "holder", 60_000).unwrap();
        let mut waiters: Vec<Queued> = Vec::new();
        for i in 0..12 {
            if i == 6 {
                // A FAIR reservation in the middle, left to run out.
                let reserved = cmd(&mut conn, &["DLOCK.FAIR", &key, "reserver", "1000"]).unwrap();
                assert_eq!(reserved, Value::Nil);
            }
            let owner = format!("q{round}.{i}");
            let short_timeout = rng.percent(20);
            let timeout = if short_timeout {
                rng.between(150, 400)
            } else {
                20_000
            };
            let ttl = rng.between(30, 120).to_string();
            let timeout = timeout.to_string();
            let mut args = vec![
                if rng.percent(50) {
                    "DLOCK.ACQUIRE"
                } else {
                    "DLOCK.FAIR"
                },
                key.as_str(),
                owner.as_str(),
                ttl.as_str(),
                "BLOCK",
                timeout.as_str(),
            ];
            if rng.percent(30) {
                args.push("SESSION");
            }
            let pending = spawn_command(&server, &args);
            wait_until(&format!("{owner} to be queued"), || {
                queue(&mut conn, &key).last() == Some(&owner)
            });
            waiters.push(Queued {
                owner,
                pending,
                short_timeout,
            });
        }
        // Kill three waiters that would otherwise stay.
        let mut killed = 0;
        while killed < 3 {
            let victim = rng.below(waiters.len() as u64) as usize;
            if waiters[victim].short_timeout {
                continue;
            }
            let gone = waiters.remove(victim);
            let id = gone.pending.id.to_string();
            assert_eq!(int(&mut conn, &["CLIENT", "KILL", "ID", &id]), 1);
            let (reply, _) = gone.pending.join();
            assert!(reply.is_err(), "killed waiter {} got {reply:?}", gone.owner);
            killed += 1;
        }
        // The short timeouts run out; the reservation too.
        let (stay, leave): (Vec<Queued>, Vec<Queued>) =
            waiters.into_iter().partition(|w| !w.short_timeout);
        for gone in leave {
            let started = gone.pending.sent;
            let at = gone.pending.refused();
            assert!(at.duration_since(started) < Duration::from_secs(5));
        }
        let expected: Vec<String> = stay.iter().map(|w| w.owner.clone()).collect();
        wait_until(&format!("the queue of {key} to settle"), || {
            queue(&mut conn, &key) == expected
        });
        // Hand on: by release (even rounds) or by lease expiry (odd rounds).
        let by_release = round % 2 == 0;
        assert_eq!(int(&mut conn, &["DLOCK.RELEASE", &key, "holder"]), 0);
        let mut grants = Vec::new();
        for waiter in stay {
            let ((token, holds, owner), _) = waiter.pending.granted();
            assert_eq!(holds, 1);
            assert_eq!(owner, waiter.owner.as_bytes());
            grants.push((token, waiter.owner.clone()));
            if by_release {
                // A session waiter's hold may be gone with its connection.
                let _ = cmd(&mut conn, &["DLOCK.RELEASE", &key, &waiter.owner]);
            }
        }
        let mut by_token = grants.clone();
        by_token.sort();
        assert_eq!(
            grants, by_token,
            "grants out of queue order in round {round}"
        );
        assert!(grants[0].0 > first);
        wait_until(&format!("{key} to be free"), || {
            int(&mut conn, &["EXISTS", &key]) == 0
        });
    }
}

/// The checker itself: a clean synthetic history passes, and each kind of
/// violation planted in it is reported.
#[test]
fn the_checker_reports_each_kind_of_violation() {
    let hold = |owner: &str, token: u64, sent: i64, recv: i64, until: i64, given_up: i64| Hold {
        key: 0,
        owner: owner.to_string(),
        token,
        holds: 0,
        session: false,
        conn: 1,
        sent,
        recv,
        live_until: until,
        given_up: Some(given_up),
        ended: "released",
    };
    let request = |owner: &str, sent: i64, recv: i64, token: u64| Request {
        owner: owner.to_string(),
        key: 0,
        block_ms: Some(0),
        sent,
        recv,
        granted: Some((token, 1)),
    };
    // a holds 100..200; b waits from 50, is seen queued at 60..70, and is
    // granted at 200 (token 20); c queues behind b and gets 30 at 300.
    let clean = || WorkerLog {
        requests: vec![
            request("a", 0, 100, 10),
            request("b", 50, 210, 20),
            request("c", 55, 310, 30),
        ],
        holds: vec![
            hold("a", 10, 0, 100, 1_000, 200),
            hold("b", 20, 50, 210, 1_000, 300),
            hold("c", 30, 55, 310, 1_000, 400),
        ],
        writes: vec![Write {
            key: 0,
            token: 20,
            at: 250,
            accepted: true,
        }],
        ..WorkerLog::default()
    };
    let snapshots = vec![Snapshot {
        key: 0,
        s0: 60,
        s1: 70,
        queue: vec!["b".to_string(), "c".to_string()],
    }];
    let findings = check(&[clean()], &[], &snapshots, 1);
    assert_eq!(findings.violations, Vec::<String>::new());
    assert!(findings.fifo_checks > 0 && findings.windows_checked == 3);

    type Plant<'a> = Box<dyn Fn(&mut WorkerLog) + 'a>;
    let planted: Vec<(&str, Plant)> = vec![
        (
            "two holders",
            Box::new(|log| log.holds[0].given_up = Some(260)),
        ),
        ("granted twice", Box::new(|log| log.holds[2].token = 20)),
        (
            "token order",
            Box::new(|log| {
                log.holds[2].token = 5;
                log.holds[2].sent = 150;
            }),
        ),
        (
            "the fence refused",
            Box::new(|log| log.writes[0].accepted = false),
        ),
        (
            "FIFO: c was granted",
            Box::new(|log| log.requests[2].granted = Some((15, 1))),
        ),
        (
            "barged in",
            Box::new(|log| log.requests.push(request("d", 80, 150, 15))),
        ),
        (
            "never killed",
            Box::new(|log| log.disconnects.push((7, 500))),
        ),
    ];
    // A SESSION hold ends when its connection is closed, even if the
    // client had walked away from it: no overlap then.
    let mut log = clean();
    log.holds[0].given_up = Some(260);
    log.holds[0].session = true;
    log.closes.push((1, 205));
    assert_eq!(
        check(&[log], &[], &snapshots, 1).violations,
        Vec::<String>::new()
    );
    for (expected, plant) in planted {
        let mut log = clean();
        plant(&mut log);
        let findings = check(&[log], &[], &snapshots, 1);
        assert!(
            findings.violations.iter().any(|v| v.contains(expected)),
            "planted '{expected}', found {:?}",
            findings.violations
        );
    }
}

// ---------------------------------------------------------------------------
// Shared holds (issue 11): readers and writers, and semaphores.
//
// The same workers, killer and clocks, with two modes:
//
// * read-write: readers (SHARED, now and then with a LIMIT too large to
//   bind) and writers (exclusive); writers write to the key's fenced
//   resource and readers read from it (a read raises the highest token the
//   resource has seen, as a fenced store does); writers downgrade (SHARED,
//   then RELEASE of the exclusive hold) and readers upgrade (an exclusive
//   acquire, BLOCK or not, which may meet DEADLOCK). Checked: no instant at
//   which a writer's exclusive hold and another owner's hold are both
//   certainly live; the resource never refuses a write made while its
//   writer was certainly exclusive, and a stale writer's write (after a
//   newer token was seen) is refused;
// * semaphore: every request of key k carries LIMIT `limit_of(k)`; checked:
//   never more owners certainly holding the key at one instant than its
//   limit;
// * weighted semaphore: the same, each request also with a WEIGHT from 1
//   to the LIMIT (random per owner and key: one owner has one weight per
//   lock, and its re-entries repeat it); checked: the weights of the owners
//   certainly holding the key at one instant never add up to more than its
//   limit, and every grant reply's holds count matches (the resource is
//   read under each hold's token, as a fenced store is).
//
// Both: every new hold (and upgrade) has a token of its own, larger than
// every token whose grant reply arrived before it was requested; grant and
// RELEASE replies count holds right in both modes; FIFO as in the exclusive
// run (a waiter seen queued is granted before those behind it and before
// later requests; upgrades, which go ahead of everyone, are not counted);
// leases end no earlier than promised; BLOCK returns null no earlier than its timeout; every
// dropped connection was killed; every lock is free at the end.
// `DLOCK_STRESS_SECS` (default 5 here) and the other variables apply.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    ReadWrite,
    Semaphore,
    Weighted,
}

/// The LIMIT of key `key` in semaphore mode.
fn limit_of(key: usize) -> u64 {
    [2, 3, 5][key % 3]
}

/// The WEIGHT of owner generation `generation` of worker `index` on key
/// `key` in weighted mode: 1..=LIMIT, spread over workers and keys, fixed
/// for an owner and key (one weight per owner and lock).
fn weight_of(index: usize, generation: u64, key: usize) -> u64 {
    let mixed = (index as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(generation.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(key as u64 * 0x94D0_49BB_1331_11EB);
    1 + (mixed >> 33) % limit_of(key)
}

/// One owner's hold (one token), in either or both modes.
#[derive(Clone, Debug)]
struct ModeHold {
    key: usize,
    owner: String,
    token: u64,
    exclusive: u64,
    shared: u64,
    /// The permits its shared holds take (WEIGHT; 1 outside weighted mode).
    weight: u64,
    session: bool,
    conn: i64,
    sent: i64,
    recv: i64,
    live_until: i64,
    given_up: Option<i64>,
    /// Closed intervals in which the owner certainly held the lock
    /// exclusively (from a grant reply to the send of the last exclusive
    /// release), and the start of the open one.
    exclusive_spans: Vec<(i64, i64)>,
    exclusive_since: Option<i64>,
    ended: &'static str,
}

impl ModeHold {
    fn window(&self, closed_at: Option<i64>) -> (i64, i64) {
        let mut end = self.live_until;
        if let Some(at) = self.given_up {
            end = end.min(at);
        }
        if self.session {
            if let Some(at) = closed_at {
                end = end.min(at);
            }
        }
        (self.recv, end)
    }

    /// The certainly-exclusive intervals, clipped to the certain window.
    fn exclusive_windows(&self, closed_at: Option<i64>) -> Vec<(i64, i64)> {
        let (start, end) = self.window(closed_at);
        self.exclusive_spans
            .iter()
            .copied()
            .chain(self.exclusive_since.map(|since| (since, end)))
            .map(|(s, e)| (s.max(start), e.min(end)))
            .filter(|(s, e)| s < e)
            .collect()
    }

    fn total(&self) -> u64 {
        self.exclusive + self.shared
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct ModeCounters {
    reads: u64,
    downgrades: u64,
    upgrades: u64,
    refused_upgrades: u64,
    deadlocks: u64,
    shared_grants: u64,
    exclusive_grants: u64,
}

#[derive(Default)]
struct ModeLog {
    holds: Vec<ModeHold>,
    counters: ModeCounters,
}

struct ModeWorker {
    worker: Worker,
    mode: Mode,
    log: ModeLog,
}

impl ModeWorker {
    fn run(mut self) -> (WorkerLog, ModeLog) {
        while !self.worker.shared.stop.load(Ordering::Relaxed) {
            let keys = self.worker.shared.settings.keys as u64;
            let key = self.worker.rng.below(keys) as usize;
            self.try_to_hold(key);
        }
        let worker = &mut self.worker;
        worker.shared.conn_ids[worker.index].store(0, Ordering::SeqCst);
        worker.log.closes.push((worker.conn_id, wall_us()));
        (std::mem::take(&mut worker.log), self.log)
    }

    /// The mode-specific options of an acquire, in random order with the
    /// others: SHARED and LIMIT.
    fn options(
        &mut self,
        key: usize,
        shared: bool,
        block_ms: Option<u64>,
        session: bool,
    ) -> Vec<String> {
        let weight = self.weight(key);
        let rng = &mut self.worker.rng;
        let mut groups: Vec<Vec<String>> = Vec::new();
        if shared {
            groups.push(vec!["SHARED".to_string()]);
            match self.mode {
                Mode::Semaphore => {
                    groups.push(vec!["LIMIT".to_string(), limit_of(key).to_string()]);
                }
                Mode::Weighted => {
                    groups.push(vec!["LIMIT".to_string(), limit_of(key).to_string()]);
                    groups.push(vec!["WEIGHT".to_string(), weight.to_string()]);
                }
                Mode::ReadWrite if rng.percent(10) => {
                    groups.push(vec!["LIMIT".to_string(), "1000".to_string()]);
                }
                Mode::ReadWrite => {}
            }
        }
        if let Some(ms) = block_ms {
            groups.push(vec!["BLOCK".to_string(), ms.to_string()]);
        }
        if session {
            groups.push(vec!["SESSION".to_string()]);
        }
        for i in (1..groups.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            groups.swap(i, j);
        }
        groups.into_iter().flatten().collect()
    }

    /// This owner's weight on `key` (1 outside weighted mode).
    fn weight(&self, key: usize) -> u64 {
        match self.mode {
            Mode::Weighted => weight_of(self.worker.index, self.worker.generation, key),
            Mode::ReadWrite | Mode::Semaphore => 1,
        }
    }

    fn try_to_hold(&mut self, key: usize) {
        let rng = &mut self.worker.rng;
        let writer = self.mode == Mode::ReadWrite && rng.percent(30);
        let blocking = rng.percent(60);
        let fair = blocking && rng.percent(30);
        let session = rng.percent(30);
        let block_ms = blocking.then(|| {
            if rng.percent(2) {
                0
            } else {
                rng.between(10, 400)
            }
        });
        let ttl = self.worker.ttl();
        let owner = self.worker.owner();
        let mut args = vec![
            if fair { "DLOCK.FAIR" } else { "DLOCK.ACQUIRE" }.to_string(),
            key_name(key),
            owner.clone(),
            ttl.to_string(),
        ];
        args.extend(self.options(key, !writer, block_ms, session));
        self.worker.log.counters.requests += 1;
        let (reply, sent, recv) = self.worker.send(&args);
        // Logged for the FIFO checks (only requests for a new hold: re-entries
        // and upgrades never queue behind others).
        let granted = match &reply {
            Reply::Value(Value::Array(items)) => match items.as_slice() {
                [Value::Int(token), Value::Int(holds), _] => Some((*token as u64, *holds as u64)),
                _ => None,
            },
            _ => None,
        };
        self.worker.log.requests.push(Request {
            owner: owner.clone(),
            key,
            block_ms,
            sent,
            recv,
            granted,
        });
        match reply {
            Reply::Value(Value::Nil) => {
                self.worker.log.counters.nulls += 1;
                if let Some(ms) = block_ms {
                    self.worker.log.counters.block_timeouts += 1;
                    if ms == 0 || recv - sent < 1_000 * ms as i64 - MARGIN_US {
                        self.worker.violation(format!(
                            "{args:?} returned null after {} µs, before its timeout",
                            recv - sent
                        ));
                    }
                }
            }
            Reply::Value(value) => {
                let Some((token, holds)) = self.worker.parse_grant(&args, value) else {
                    return;
                };
                if holds != 1 {
                    self.worker.violation(format!(
                        "{args:?} was a re-entry (holds {holds}) of a hold this owner never had"
                    ));
                    return;
                }
                let waited = block_ms.is_some() && recv - sent > 2_000;
                self.worker.log.counters.grants += 1;
                if waited {
                    self.worker.log.counters.blocked_grants += 1;
                }
                if writer {
                    self.log.counters.exclusive_grants += 1;
                } else {
                    self.log.counters.shared_grants += 1;
                }
                let hold = ModeHold {
                    key,
                    owner,
                    token,
                    exclusive: writer as u64,
                    shared: !writer as u64,
                    weight: if writer { 1 } else { self.weight(key) },
                    session,
                    conn: self.worker.conn_id,
                    sent,
                    recv,
                    live_until: sent + 1_000 * ttl as i64 - MARGIN_US,
                    given_up: None,
                    exclusive_spans: Vec::new(),
                    exclusive_since: writer.then_some(recv),
                    ended: "",
                };
                self.critical_section(hold, ttl, waited);
            }
            Reply::Broken => self.worker.lost_connection(),
            Reply::NotOwner => self.worker.violation(format!("{args:?} replied NOTOWNER")),
            Reply::Failed(text) => self.worker.violation(text),
        }
    }

    fn keep(&mut self, mut hold: ModeHold, how: &'static str) {
        hold.ended = how;
        self.log.holds.push(hold);
    }

    /// Reads or writes the key's fenced resource under the hold's token.
    fn touch_resource(&mut self, hold: &ModeHold) {
        if self.mode != Mode::ReadWrite {
            // A semaphore's permits guard no single writer: its holders
            // read under their tokens.
            let mut fence = self.worker.shared.fences[hold.key].lock().unwrap();
            fence.observe(hold.token, &hold.owner);
            drop(fence);
            self.log.counters.reads += 1;
            return;
        }
        if hold.exclusive > 0 {
            self.worker.write(&Hold {
                key: hold.key,
                owner: hold.owner.clone(),
                token: hold.token,
                holds: hold.exclusive,
                session: hold.session,
                conn: hold.conn,
                sent: hold.sent,
                recv: hold.recv,
                live_until: hold.live_until,
                given_up: None,
                ended: "",
            });
        } else {
            let mut fence = self.worker.shared.fences[hold.key].lock().unwrap();
            fence.observe(hold.token, &hold.owner);
            drop(fence);
            self.log.counters.reads += 1;
        }
    }

    fn critical_section(&mut self, mut hold: ModeHold, mut ttl: u64, waited: bool) {
        if waited && self.worker.rng.percent(60) {
            ttl = self.worker.ttl();
            if let Some(outcome) = self.renew(&mut hold, ttl) {
                return self.end(hold, outcome, "renewal");
            }
        }
        let steps = self.worker.rng.between(1, 3);
        for _ in 0..steps {
            self.worker.work_for_a_while(ttl);
            self.touch_resource(&hold);
            let step = self.worker.rng.below(100);
            ttl = self.worker.ttl();
            let read_write = self.mode == Mode::ReadWrite;
            let outcome = if step < 20 {
                self.renew(&mut hold, ttl)
            } else if step < 35 {
                let shared = if hold.exclusive > 0 && read_write {
                    self.worker.rng.percent(50) && hold.shared > 0
                } else {
                    true
                };
                self.reenter(&mut hold, ttl, shared)
            } else if step < 47 && read_write && hold.exclusive > 0 {
                self.downgrade(&mut hold, ttl)
            } else if step < 55 && read_write && hold.exclusive == 0 {
                match self.upgrade(hold, ttl) {
                    Ok(upgraded) => {
                        hold = upgraded;
                        None
                    }
                    Err(()) => return,
                }
            } else {
                None
            };
            if let Some(outcome) = outcome {
                return self.end(hold, outcome, "");
            }
        }
        let finish = self.worker.rng.below(100);
        if finish < 8 {
            self.worker.log.counters.abandoned += 1;
            self.keep(hold, "abandoned");
            self.worker.fresh_generation();
        } else if finish < 20 && hold.session {
            self.worker.log.counters.closed += 1;
            let at = wall_us();
            hold.given_up = Some(at);
            self.keep(hold, "its connection was closed");
            let worker = &mut self.worker;
            worker.log.closes.push((worker.conn_id, at));
            worker.shared.conn_ids[worker.index].store(0, Ordering::SeqCst);
            let replacement = connect_port(worker.shared.port, READ_TIMEOUT);
            drop(std::mem::replace(&mut worker.conn, replacement));
            worker.conn_id = client_id_of(&mut worker.conn);
            worker.shared.conn_ids[worker.index].store(worker.conn_id, Ordering::SeqCst);
            worker.fresh_generation();
        } else {
            self.release_all(hold);
        }
    }

    /// Ends the hold after a step that did not keep it.
    fn end(&mut self, hold: ModeHold, outcome: Step, _what: &str) {
        match outcome {
            Step::Holding => self.release_all(hold),
            Step::Ended => {
                self.keep(hold, "the server ended it");
                self.worker.fresh_generation();
            }
            Step::Broken => {
                self.keep(hold, "its connection broke");
                self.worker.lost_connection();
            }
        }
    }

    /// RENEW: None while holding, or how the hold ended.
    fn renew(&mut self, hold: &mut ModeHold, ttl: u64) -> Option<Step> {
        let args = vec![
            "DLOCK.RENEW".to_string(),
            key_name(hold.key),
            hold.owner.clone(),
            ttl.to_string(),
        ];
        let (reply, sent, recv) = self.worker.send(&args);
        match reply {
            Reply::Value(Value::Int(token)) if token as u64 == hold.token => {
                self.worker.log.counters.renewals += 1;
                hold.live_until = sent + 1_000 * ttl as i64 - MARGIN_US;
                None
            }
            Reply::NotOwner => {
                self.ended_by_server(hold, recv, "RENEW replied NOTOWNER");
                Some(Step::Ended)
            }
            Reply::Broken => {
                hold.live_until = hold.live_until.min(sent + 1_000 * ttl as i64 - MARGIN_US);
                Some(Step::Broken)
            }
            Reply::Value(other) => {
                self.worker
                    .violation(format!("{args:?} replied {other:?}, not {}", hold.token));
                Some(Step::Ended)
            }
            Reply::Failed(text) => {
                self.worker.violation(text);
                Some(Step::Ended)
            }
        }
    }

    fn ended_by_server(&mut self, hold: &ModeHold, recv: i64, what: &str) {
        self.worker.log.counters.expiries_seen += 1;
        if recv < hold.live_until {
            self.worker.violation(format!(
                "{what}: {} lost {} (token {}) {} µs before its lease could end",
                hold.owner,
                key_name(hold.key),
                hold.token,
                hold.live_until - recv
            ));
        }
    }

    /// A re-entry in one mode (shared, or exclusive while holding it):
    /// granted at once with the same token, whatever waits.
    fn reenter(&mut self, hold: &mut ModeHold, ttl: u64, shared: bool) -> Option<Step> {
        let rng = &mut self.worker.rng;
        let command = if rng.percent(50) {
            "DLOCK.ACQUIRE"
        } else {
            "DLOCK.FAIR"
        };
        let block_ms = rng.percent(30).then(|| rng.between(10, 200));
        let mut args = vec![
            command.to_string(),
            key_name(hold.key),
            hold.owner.clone(),
            ttl.to_string(),
        ];
        args.extend(self.options(hold.key, shared, block_ms, hold.session));
        self.worker.log.counters.requests += 1;
        let (reply, sent, recv) = self.worker.send(&args);
        let count = if shared { hold.shared } else { hold.exclusive };
        match reply {
            Reply::Value(Value::Nil) => {
                self.ended_by_server(hold, recv, "re-entry refused");
                Some(Step::Ended)
            }
            Reply::Value(value) => match self.worker.parse_grant(&args, value) {
                Some((token, holds)) if token == hold.token && holds == count + 1 => {
                    self.worker.log.counters.reentries += 1;
                    if shared {
                        hold.shared += 1;
                    } else {
                        hold.exclusive += 1;
                    }
                    hold.live_until = sent + 1_000 * ttl as i64 - MARGIN_US;
                    None
                }
                Some((token, 1)) if token != hold.token => {
                    // The lease had ended: a new hold, which the client
                    // walks away from.
                    self.ended_by_server(hold, recv, "re-entry gave a new token");
                    self.worker.log.counters.grants += 1;
                    let fresh = ModeHold {
                        key: hold.key,
                        owner: hold.owner.clone(),
                        token,
                        exclusive: !shared as u64,
                        shared: shared as u64,
                        weight: hold.weight,
                        session: hold.session,
                        conn: self.worker.conn_id,
                        sent,
                        recv,
                        live_until: sent + 1_000 * ttl as i64 - MARGIN_US,
                        given_up: None,
                        exclusive_spans: Vec::new(),
                        exclusive_since: (!shared).then_some(recv),
                        ended: "",
                    };
                    self.keep(fresh, "abandoned (a re-entry got a new token)");
                    Some(Step::Ended)
                }
                Some((token, holds)) => {
                    self.worker.violation(format!(
                        "{args:?} by the holder of token {} ({} exclusive, {} shared) replied token {token} holds {holds}",
                        hold.token, hold.exclusive, hold.shared
                    ));
                    Some(Step::Ended)
                }
                None => Some(Step::Ended),
            },
            Reply::Broken => {
                hold.live_until = hold.live_until.min(sent + 1_000 * ttl as i64 - MARGIN_US);
                Some(Step::Broken)
            }
            Reply::NotOwner => {
                self.worker.violation(format!("{args:?} replied NOTOWNER"));
                Some(Step::Ended)
            }
            Reply::Failed(text) => {
                self.worker.violation(text);
                Some(Step::Ended)
            }
        }
    }

    /// One RELEASE (exclusive) or RELEASE SHARED; None while holds remain.
    fn release_one(&mut self, hold: &mut ModeHold, shared: bool) -> Option<Step> {
        let mut args = vec![
            "DLOCK.RELEASE".to_string(),
            key_name(hold.key),
            hold.owner.clone(),
        ];
        if shared {
            args.push("SHARED".to_string());
        }
        let (reply, sent, recv) = self.worker.send(&args);
        match reply {
            Reply::Value(Value::Int(left)) if left as u64 == hold.total() - 1 => {
                self.worker.log.counters.releases += 1;
                if shared {
                    hold.shared -= 1;
                } else {
                    hold.exclusive -= 1;
                    if hold.exclusive == 0 {
                        if let Some(since) = hold.exclusive_since.take() {
                            hold.exclusive_spans.push((since, sent));
                        }
                    }
                }
                if hold.total() == 0 {
                    hold.given_up = Some(sent);
                }
                None
            }
            Reply::NotOwner => {
                self.ended_by_server(hold, recv, "RELEASE replied NOTOWNER");
                Some(Step::Ended)
            }
            Reply::Broken => {
                hold.given_up = Some(sent);
                Some(Step::Broken)
            }
            Reply::Value(other) => {
                self.worker.violation(format!(
                    "{args:?} with {} exclusive and {} shared holds replied {other:?}",
                    hold.exclusive, hold.shared
                ));
                Some(Step::Ended)
            }
            Reply::Failed(text) => {
                self.worker.violation(text);
                Some(Step::Ended)
            }
        }
    }

    /// A writer takes a shared hold, then gives up every exclusive one.
    fn downgrade(&mut self, hold: &mut ModeHold, ttl: u64) -> Option<Step> {
        if hold.shared == 0 {
            if let Some(step) = self.reenter(hold, ttl, true) {
                return Some(step);
            }
        }
        while hold.exclusive > 0 {
            if let Some(step) = self.release_one(hold, false) {
                return Some(step);
            }
        }
        self.log.counters.downgrades += 1;
        None
    }

    /// A reader asks for an exclusive hold: granted with a new token (a new
    /// record, the old one ending at the grant), refused (still reading), or
    /// DEADLOCK. Err: the hold was ended and recorded.
    fn upgrade(&mut self, mut hold: ModeHold, ttl: u64) -> Result<ModeHold, ()> {
        // Pin the shared lease well past any BLOCK, so that a grant is an
        // upgrade of a live hold.
        if let Some(outcome) = self.renew(&mut hold, 1_000) {
            self.end(hold, outcome, "renewal before an upgrade");
            return Err(());
        }
        let rng = &mut self.worker.rng;
        let block_ms = rng.percent(50).then(|| rng.between(10, 300));
        let mut args = vec![
            "DLOCK.ACQUIRE".to_string(),
            key_name(hold.key),
            hold.owner.clone(),
            ttl.to_string(),
        ];
        if let Some(ms) = block_ms {
            args.extend(["BLOCK".to_string(), ms.to_string()]);
        }
        self.worker.log.counters.requests += 1;
        let (reply, sent, recv) = self.worker.send(&args);
        match reply {
            Reply::Value(Value::Nil) => {
                self.log.counters.refused_upgrades += 1;
                Ok(hold)
            }
            Reply::Value(value) => match self.worker.parse_grant(&args, value) {
                Some((token, 1)) if token > hold.token => {
                    self.log.counters.upgrades += 1;
                    let upgraded = ModeHold {
                        token,
                        exclusive: 1,
                        sent,
                        recv,
                        live_until: sent + 1_000 * ttl as i64 - MARGIN_US,
                        given_up: None,
                        exclusive_spans: Vec::new(),
                        exclusive_since: Some(recv),
                        ended: "",
                        ..hold.clone()
                    };
                    let ambiguous = recv >= hold.live_until;
                    hold.given_up = Some(recv);
                    self.keep(hold, "upgraded");
                    if ambiguous {
                        // The shared lease may have ended while it waited:
                        // the counts are unknown, so walk away.
                        self.keep(upgraded, "abandoned (an upgrade after the lease)");
                        self.worker.fresh_generation();
                        return Err(());
                    }
                    Ok(upgraded)
                }
                Some((token, holds)) => {
                    self.worker.violation(format!(
                        "{args:?}: an upgrade of token {} replied token {token} holds {holds}",
                        hold.token
                    ));
                    self.keep(hold, "a bad upgrade");
                    self.worker.fresh_generation();
                    Err(())
                }
                None => {
                    self.keep(hold, "a bad upgrade");
                    self.worker.fresh_generation();
                    Err(())
                }
            },
            Reply::Failed(text) if text.contains("DEADLOCK") && block_ms.is_some() => {
                self.log.counters.deadlocks += 1;
                Ok(hold)
            }
            Reply::Failed(text) => {
                self.worker.violation(text);
                Ok(hold)
            }
            Reply::NotOwner => {
                self.worker.violation(format!("{args:?} replied NOTOWNER"));
                Ok(hold)
            }
            Reply::Broken => {
                self.end(hold, Step::Broken, "upgrade");
                Err(())
            }
        }
    }

    fn release_all(&mut self, mut hold: ModeHold) {
        while hold.total() > 0 {
            let shared = hold.exclusive == 0 || (hold.shared > 0 && self.worker.rng.percent(50));
            match self.release_one(&mut hold, shared) {
                None => {}
                Some(Step::Broken) => {
                    self.keep(hold, "its connection broke (release)");
                    self.worker.lost_connection();
                    return;
                }
                Some(_) => break,
            }
        }
        let how = if hold.total() == 0 {
            "released"
        } else {
            "release failed"
        };
        self.keep(hold, how);
    }
}

impl Fence {
    /// A read under `token`: the resource has now seen it.
    fn observe(&mut self, token: u64, owner: &str) {
        if token > self.highest {
            self.highest = token;
            self.highest_owner = owner.to_string();
        }
    }
}

#[derive(Default)]
struct ModeFindings {
    violations: Vec<String>,
    pairs_ordered: u64,
    windows_checked: u64,
    /// The most owners certainly holding one key at one instant.
    most_at_once: usize,
    /// The most permits (weights added up) certainly held on one key at
    /// one instant.
    most_permits: u64,
    /// Instants at which several owners certainly held one key and one of
    /// them more than one permit.
    heavy_overlaps: u64,
}

impl ModeFindings {
    fn flag(&mut self, text: String) {
        if self.violations.len() < 200 {
            self.violations.push(text);
        }
    }
}

fn check_modes(
    mode: Mode,
    logs: &[WorkerLog],
    mode_logs: &[ModeLog],
    kills: &[(i64, i64)],
    keys: usize,
) -> ModeFindings {
    let mut findings = ModeFindings::default();
    for log in logs {
        for text in &log.violations {
            findings.flag(text.clone());
        }
    }
    let killed_at: HashMap<i64, i64> = kills.iter().copied().collect();
    let mut closed_at = killed_at.clone();
    for (conn, at) in logs.iter().flat_map(|log| &log.closes) {
        let first = closed_at.entry(*conn).or_insert(*at);
        *first = (*first).min(*at);
    }
    for log in logs {
        for (conn, at) in &log.disconnects {
            match killed_at.get(conn) {
                Some(kill) if *kill <= *at => {}
                _ => findings.flag(format!(
                    "connection {conn} broke at {at} but was never killed"
                )),
            }
        }
    }
    let holds: Vec<&ModeHold> = mode_logs.iter().flat_map(|log| &log.holds).collect();

    // Every token belongs to one owner on one key.
    let mut by_token: HashMap<u64, &ModeHold> = HashMap::new();
    for hold in &holds {
        if let Some(other) = by_token.insert(hold.token, hold) {
            if other.owner != hold.owner || other.key != hold.key {
                findings.flag(format!(
                    "token {} granted twice: {} on {} and {} on {}",
                    hold.token,
                    other.owner,
                    key_name(other.key),
                    hold.owner,
                    key_name(hold.key)
                ));
            }
        }
    }

    // A hold requested after another's grant reply has a larger token.
    let mut by_recv = holds.clone();
    by_recv.sort_by_key(|hold| hold.recv);
    let mut by_sent = holds.clone();
    by_sent.sort_by_key(|hold| hold.sent);
    let mut next = 0;
    let mut highest: Option<&ModeHold> = None;
    for hold in &by_sent {
        while next < by_recv.len() && by_recv[next].recv < hold.sent {
            if highest.is_none_or(|h| by_recv[next].token > h.token) {
                highest = Some(by_recv[next]);
            }
            next += 1;
        }
        if let Some(earlier) = highest {
            findings.pairs_ordered += 1;
            if earlier.token >= hold.token {
                findings.flag(format!(
                    "token order: {} got {} on {} after {} had received {} on {}",
                    hold.owner,
                    hold.token,
                    key_name(hold.key),
                    earlier.owner,
                    earlier.token,
                    key_name(earlier.key)
                ));
            }
        }
    }

    // Exclusion (read-write) or the limit (semaphore), per key: a sweep over
    // the certainly-live windows and the certainly-exclusive intervals.
    for key in 0..keys {
        // (start, end, exclusive, hold)
        let mut spans: Vec<(i64, i64, bool, &ModeHold)> = Vec::new();
        for hold in holds.iter().filter(|hold| hold.key == key) {
            let closed = closed_at.get(&hold.conn).copied();
            let (start, end) = hold.window(closed);
            if start < end {
                spans.push((start, end, false, hold));
            }
            for (start, end) in hold.exclusive_windows(closed) {
                spans.push((start, end, true, hold));
            }
        }
        spans.sort_by_key(|(start, _, _, _)| *start);
        let mut active: Vec<(i64, i64, bool, &ModeHold)> = Vec::new();
        for span in spans {
            let (start, _, exclusive, hold) = span;
            active.retain(|(_, until, _, _)| *until > start);
            findings.windows_checked += 1;
            for (from, until, other_exclusive, other) in &active {
                if other.owner != hold.owner && (exclusive || *other_exclusive) {
                    findings.flag(format!(
                        "a writer with another holder on {}: {} (token {}, {}, certainly live {from}..{until}) and {} (token {}, {}, from {start})",
                        key_name(key),
                        other.owner,
                        other.token,
                        if *other_exclusive { "exclusive" } else { "held" },
                        hold.owner,
                        hold.token,
                        if exclusive { "exclusive" } else { "held" },
                    ));
                }
            }
            if !exclusive {
                let mut owners: Vec<(&str, u64)> = active
                    .iter()
                    .filter(|(_, _, x, _)| !x)
                    .map(|(_, _, _, h)| (h.owner.as_str(), h.weight))
                    .chain([(hold.owner.as_str(), hold.weight)])
                    .collect();
                owners.sort();
                owners.dedup_by_key(|(owner, _)| *owner);
                let permits: u64 = owners.iter().map(|(_, weight)| weight).sum();
                findings.most_permits = findings.most_permits.max(permits);
                if owners.len() >= 2 && permits > owners.len() as u64 {
                    findings.heavy_overlaps += 1;
                }
                if mode == Mode::Weighted && permits > limit_of(key) {
                    findings.flag(format!(
                        "{permits} permits held on {} (LIMIT {}) at {start}: {owners:?}",
                        key_name(key),
                        limit_of(key)
                    ));
                }
                let owners: Vec<&str> = owners.iter().map(|(owner, _)| *owner).collect();
                findings.most_at_once = findings.most_at_once.max(owners.len());
                if mode == Mode::Semaphore && owners.len() as u64 > limit_of(key) {
                    findings.flag(format!(
                        "{} owners hold {} (LIMIT {}) at {start}: {owners:?}",
                        owners.len(),
                        key_name(key),
                        limit_of(key)
                    ));
                }
            }
            active.push(span);
        }
    }

    // The fence refused no write made while its writer was certainly
    // exclusive.
    let by_key_token: HashMap<(usize, u64), &ModeHold> = holds
        .iter()
        .map(|hold| ((hold.key, hold.token), *hold))
        .collect();
    for write in logs.iter().flat_map(|log| &log.writes) {
        if write.accepted {
            continue;
        }
        let Some(hold) = by_key_token.get(&(write.key, write.token)) else {
            findings.flag(format!("a write under unknown token {}", write.token));
            continue;
        };
        let spans = hold.exclusive_windows(closed_at.get(&hold.conn).copied());
        if let Some((_, end)) = spans.iter().find(|(s, e)| *s <= write.at && write.at < *e) {
            findings.flag(format!(
                "the fence refused {} (token {}) on {} {} µs before its exclusive hold could end",
                hold.owner,
                hold.token,
                key_name(hold.key),
                end - write.at
            ));
        }
    }
    findings
}

/// Runs the workers of `mode` against a fresh server, checks the logs, and
/// returns the findings and counters (after asserting zero violations).
fn run_mode(mode: Mode) -> (ModeFindings, Counters, ModeCounters) {
    let mut settings = Settings::from_env();
    settings.secs = env_number("DLOCK_STRESS_SECS", 5);
    eprintln!(
        "stress {mode:?}: {} clients, {} s, {} keys, seed {} (DLOCK_STRESS_SEED to replay)",
        settings.clients, settings.secs, settings.keys, settings.seed
    );
    let server = Server::start();
    let mut conn = server.connect();
    config_set(
        &mut conn,
        "dlock.fair-reservation-ms",
        &RESERVATION_MS.to_string(),
    );
    let shared = Arc::new(Shared {
        port: server.port,
        settings,
        stop: AtomicBool::new(false),
        fences: (0..settings.keys).map(|_| Mutex::default()).collect(),
        conn_ids: (0..settings.clients).map(|_| AtomicI64::new(0)).collect(),
        generation: AtomicU64::new(0),
    });
    let started = Instant::now();
    let workers: Vec<_> = (0..settings.clients)
        .map(|index| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                ModeWorker {
                    worker: Worker::new(index, shared),
                    mode,
                    log: ModeLog::default(),
                }
                .run()
            })
        })
        .collect();
    let killer = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || killer(shared))
    };
    let monitor = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || monitor(shared))
    };
    while started.elapsed() < Duration::from_secs(settings.secs) {
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            workers.iter().all(|w| !w.is_finished()),
            "a worker stopped early (panicked?)"
        );
    }
    shared.stop.store(true, Ordering::Relaxed);
    let (logs, mode_logs): (Vec<WorkerLog>, Vec<ModeLog>) = workers
        .into_iter()
        .map(|w| w.join().expect("a worker panicked"))
        .unzip();
    let kills = killer.join().expect("the killer panicked");
    let snapshots = monitor.join().expect("the monitor panicked");
    let ran_for = started.elapsed();
    for key in 0..settings.keys {
        wait_until(&format!("{} to be free", key_name(key)), || {
            int(&mut conn, &["EXISTS", &key_name(key)]) == 0
        });
    }
    wait_for_blocked_clients(&mut conn, 0);

    let mut findings = check_modes(mode, &logs, &mode_logs, &kills, settings.keys);
    // FIFO, with the checker of the exclusive run over the requests alone
    // (the holds and writes are checked above).
    let requests_only: Vec<WorkerLog> = logs
        .iter()
        .map(|log| WorkerLog {
            requests: log.requests.clone(),
            ..WorkerLog::default()
        })
        .collect();
    let fifo = check(&requests_only, &kills, &snapshots, settings.keys);
    for text in fifo.violations {
        findings.flag(text);
    }
    let mut counters = Counters::default();
    for log in &logs {
        counters.add(&log.counters);
    }
    let mut mode_counters = ModeCounters::default();
    for log in &mode_logs {
        let c = &log.counters;
        mode_counters.reads += c.reads;
        mode_counters.downgrades += c.downgrades;
        mode_counters.upgrades += c.upgrades;
        mode_counters.refused_upgrades += c.refused_upgrades;
        mode_counters.deadlocks += c.deadlocks;
        mode_counters.shared_grants += c.shared_grants;
        mode_counters.exclusive_grants += c.exclusive_grants;
    }
    let mut fence_violations = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for fence in &shared.fences {
        let fence = fence.lock().unwrap();
        accepted += fence.accepted;
        refused += fence.refused;
        fence_violations.extend(fence.violations.iter().cloned());
    }
    eprintln!(
        "stress {mode:?}: ran {:.1} s; {} requests, {} new holds ({} shared, {} exclusive, {} after waiting), {} re-entries, {} renewals, {} releases, {} nulls ({} BLOCK timeouts)",
        ran_for.as_secs_f64(),
        counters.requests,
        counters.grants,
        mode_counters.shared_grants,
        mode_counters.exclusive_grants,
        counters.blocked_grants,
        counters.reentries,
        counters.renewals,
        counters.releases,
        counters.nulls,
        counters.block_timeouts,
    );
    eprintln!(
        "stress {mode:?}: downgrades {}, upgrades {} (refused {}, DEADLOCK {}), reads {}, fenced writes accepted {accepted}, refused {refused} (stale writers); expiries seen {}, abandoned {}, SESSION closes {}, kills {}, broken connections {}",
        mode_counters.downgrades,
        mode_counters.upgrades,
        mode_counters.refused_upgrades,
        mode_counters.deadlocks,
        mode_counters.reads,
        counters.expiries_seen,
        counters.abandoned,
        counters.closed,
        kills.len(),
        counters.disconnects,
    );
    eprintln!(
        "stress {mode:?}: checked {} token orderings, {} windows, {} FIFO orderings from {} queue snapshots; at most {} owners, {} permits at once",
        findings.pairs_ordered,
        findings.windows_checked,
        fifo.fifo_checks,
        snapshots.len(),
        findings.most_at_once,
        findings.most_permits
    );
    let violations: Vec<String> = findings
        .violations
        .iter()
        .cloned()
        .chain(fence_violations)
        .collect();
    eprintln!("stress {mode:?}: violations: {}", violations.len());
    assert!(
        violations.is_empty(),
        "{} violations (seed {}):\n{}",
        violations.len(),
        settings.seed,
        violations.join("\n")
    );
    assert!(counters.grants >= 100, "too little progress: {counters:?}");
    assert!(counters.blocked_grants > 0, "no hand-offs: {counters:?}");
    assert!(counters.expiries_seen > 0, "no lease ran out: {counters:?}");
    assert!(!kills.is_empty(), "no connection was killed");
    assert!(
        findings.most_at_once >= 2,
        "never two holders at once: {mode_counters:?}"
    );
    assert!(fifo.fifo_checks > 0, "no FIFO ordering was checked");
    (findings, counters, mode_counters)
}

#[test]
fn readers_and_writers_never_overlap_and_stale_writers_are_fenced() {
    let (_, _, counters) = run_mode(Mode::ReadWrite);
    assert!(counters.exclusive_grants > 0 && counters.shared_grants > 0);
    assert!(counters.downgrades > 0, "no downgrade: {counters:?}");
    assert!(
        counters.upgrades + counters.refused_upgrades + counters.deadlocks > 0,
        "no upgrade tried: {counters:?}"
    );
    assert!(counters.reads > 0);
}

#[test]
fn a_semaphore_never_has_more_holders_than_its_limit() {
    let (findings, _, _) = run_mode(Mode::Semaphore);
    assert!(
        findings.most_at_once as u64 <= limit_of(2),
        "checked against the largest LIMIT"
    );
}

#[test]
fn a_weighted_semaphore_never_holds_more_permits_than_its_limit() {
    let (findings, _, counters) = run_mode(Mode::Weighted);
    assert!(counters.shared_grants > 0 && counters.exclusive_grants == 0);
    assert!(
        findings.most_permits <= limit_of(2),
        "checked against the largest LIMIT"
    );
    assert!(
        findings.heavy_overlaps > 0,
        "no owner ever held more than one permit beside another"
    );
}

/// The shared-mode checker itself: a clean history passes, and a writer
/// overlapping a reader, or a semaphore over its limit, is reported.
#[test]
fn the_shared_checker_reports_overlaps_and_overfull_semaphores() {
    let hold = |owner: &str, token: u64, recv: i64, until: i64, exclusive: bool| ModeHold {
        key: 0,
        owner: owner.to_string(),
        token,
        exclusive: 0,
        shared: 0,
        weight: 1,
        session: false,
        conn: token as i64,
        sent: recv - 10,
        recv,
        live_until: until,
        given_up: Some(until),
        exclusive_spans: if exclusive {
            vec![(recv, until)]
        } else {
            Vec::new()
        },
        exclusive_since: None,
        ended: "released",
    };
    let run = |holds: Vec<ModeHold>, mode: Mode| {
        let log = ModeLog {
            holds,
            counters: ModeCounters::default(),
        };
        check_modes(mode, &[WorkerLog::default()], &[log], &[], 1).violations
    };
    // Two readers together, then a writer, then a downgraded writer with a
    // reader: clean.
    let mut downgraded = hold("d", 40, 400, 600, false);
    downgraded.exclusive_spans = vec![(400, 450)];
    let clean = vec![
        hold("r1", 10, 100, 200, false),
        hold("r2", 20, 150, 250, false),
        hold("w", 30, 260, 300, true),
        downgraded.clone(),
        hold("r3", 50, 460, 500, false),
    ];
    assert_eq!(run(clean.clone(), Mode::ReadWrite), Vec::<String>::new());
    // A reader inside the downgrading writer's exclusive span.
    let mut overlap = clean.clone();
    overlap[4].recv = 440;
    let found = run(overlap, Mode::ReadWrite);
    assert!(
        found
            .iter()
            .any(|v| v.contains("a writer with another holder")),
        "{found:?}"
    );
    // Two writers at once.
    let two = vec![hold("a", 1, 0, 100, true), hold("b", 2, 50, 150, true)];
    assert!(!run(two, Mode::ReadWrite).is_empty());
    // Three holders of a LIMIT 2 key.
    let three = vec![
        hold("a", 1, 0, 100, false),
        hold("b", 2, 10, 100, false),
        hold("c", 3, 20, 100, false),
    ];
    let found = run(three.clone(), Mode::Semaphore);
    assert!(found.iter().any(|v| v.contains("LIMIT 2")), "{found:?}");
    assert_eq!(
        run(three[..2].to_vec(), Mode::Semaphore),
        Vec::<String>::new()
    );
    // Weights 1 and 2 of a LIMIT 2 key: over; 1 and 1: within.
    let mut heavy = three[..2].to_vec();
    heavy[1].weight = 2;
    let found = run(heavy, Mode::Weighted);
    assert!(
        found
            .iter()
            .any(|v| v.contains("3 permits") && v.contains("LIMIT 2")),
        "{found:?}"
    );
    assert_eq!(
        run(three[..2].to_vec(), Mode::Weighted),
        Vec::<String>::new()
    );
}

// ---------------------------------------------------------------------------
// Multi-key mode: DLOCK.MACQUIRE over random overlapping key sets.
// ---------------------------------------------------------------------------

/// Keys of the multi-key run; each client takes 2 to 4 of them at once.
const MULTI_KEYS: usize = 8;

/// How late past its BLOCK timeout a MACQUIRE may be answered on a loaded
/// machine before it counts as a waiter left hanging (µs).
const MULTI_LATE_US: i64 = 1_000_000;

impl Worker {
    fn run_multi(mut self) -> WorkerLog {
        while !self.shared.stop.load(Ordering::Relaxed) {
            self.try_to_hold_all();
        }
        self.shared.conn_ids[self.index].store(0, Ordering::SeqCst);
        self.log.closes.push((self.conn_id, wall_us()));
        self.log
    }

    /// A random set of 2 to 4 keys in random order.
    fn key_set(&mut self) -> Vec<usize> {
        let keys = self.shared.settings.keys;
        let mut all: Vec<usize> = (0..keys).collect();
        for i in (1..keys).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            all.swap(i, j);
        }
        let count = self.rng.between(2, 4.min(keys as u64)) as usize;
        all.truncate(count);
        all
    }

    /// One `DLOCK.MACQUIRE ... BLOCK` over a random key set; when granted,
    /// a fenced write per key under that key's token, then a release of
    /// every key.
    fn try_to_hold_all(&mut self) {
        let keys = self.key_set();
        let session = self.rng.percent(20);
        let ttl = self.ttl();
        // BLOCK 0 now and then: a cycle of waiters would hang it.
        let block_ms = if self.rng.percent(5) {
            0
        } else {
            self.rng.between(10, 400)
        };
        let owner = self.owner();
        let mut args = vec!["DLOCK.MACQUIRE".to_string(), keys.len().to_string()];
        args.extend(keys.iter().map(|&key| key_name(key)));
        args.extend([
            owner.clone(),
            ttl.to_string(),
            "BLOCK".to_string(),
            block_ms.to_string(),
        ]);
        if session {
            args.push("SESSION".to_string());
        }
        self.log.counters.requests += 1;
        let (reply, sent, recv) = self.send(&args);
        if block_ms > 0 && recv - sent > 1_000 * block_ms as i64 + MULTI_LATE_US {
            self.violation(format!(
                "{args:?} answered {} ms after its BLOCK timeout",
                (recv - sent) / 1000 - block_ms as i64
            ));
        }
        let request = |key: usize, granted: Option<(u64, u64)>| Request {
            owner: owner.clone(),
            key,
            block_ms: Some(block_ms),
            sent,
            recv,
            granted,
        };
        match reply {
            Reply::Value(Value::Nil) => {
                for &key in &keys {
                    self.log.requests.push(request(key, None));
                }
                self.log.counters.nulls += 1;
                self.log.counters.block_timeouts += 1;
                if block_ms == 0 || recv - sent < 1_000 * block_ms as i64 - MARGIN_US {
                    self.violation(format!(
                        "{args:?} returned null after {} µs, before its timeout",
                        recv - sent
                    ));
                }
            }
            Reply::Value(Value::Array(items)) if items.len() == keys.len() => {
                let mut holds = Vec::with_capacity(keys.len());
                for (&key, item) in keys.iter().zip(items) {
                    let one = vec!["DLOCK.MACQUIRE".to_string(), key_name(key), owner.clone()];
                    let Some((token, count)) = self.parse_grant(&one, item) else {
                        return;
                    };
                    self.log.requests.push(request(key, Some((token, count))));
                    if count != 1 {
                        self.violation(format!(
                            "{args:?} was a re-entry (holds {count}) on {} of a hold this owner never had",
                            key_name(key)
                        ));
                        return;
                    }
                    holds.push(Hold {
                        key,
                        owner: owner.clone(),
                        token,
                        holds: 1,
                        session,
                        conn: self.conn_id,
                        sent,
                        recv,
                        live_until: sent + 1_000 * ttl as i64 - MARGIN_US,
                        given_up: None,
                        ended: "",
                    });
                }
                self.log.counters.grants += 1;
                if recv - sent > 2_000 {
                    self.log.counters.blocked_grants += 1;
                }
                // A lease granted after waiting started at an unknown
                // instant: renewing each key pins down how long it lasts.
                let mut ttl = ttl;
                if self.rng.percent(60) {
                    ttl = self.ttl();
                    let Some(renewed) = self.renew_each(holds, ttl) else {
                        return;
                    };
                    holds = renewed;
                }
                for hold in &holds {
                    self.write(hold);
                }
                self.work_for_a_while(ttl);
                for hold in &holds {
                    self.write(hold);
                }
                self.release_each(holds);
            }
            Reply::Value(other) => {
                self.violation(format!("{args:?}: bad reply {other:?}"));
            }
            Reply::Broken => {
                for &key in &keys {
                    self.log.requests.push(request(key, None));
                }
                self.lost_connection();
            }
            Reply::NotOwner => self.violation(format!("{args:?} replied NOTOWNER")),
            Reply::Failed(text) => self.violation(text),
        }
    }

    /// Renews every key of a multi-key grant; returns the holds still held,
    /// or None when the connection broke (every hold is then kept).
    fn renew_each(&mut self, holds: Vec<Hold>, ttl: u64) -> Option<Vec<Hold>> {
        let mut held = Vec::with_capacity(holds.len());
        let mut ended = false;
        let mut rest = holds.into_iter();
        while let Some(mut hold) = rest.next() {
            match self.renew(&mut hold, ttl) {
                Step::Holding => held.push(hold),
                Step::Ended => {
                    self.keep(hold, "the server ended it (renewal)");
                    ended = true;
                }
                Step::Broken => {
                    self.keep(hold, "its connection broke (renewal)");
                    for hold in held.into_iter().chain(rest) {
                        self.log.counters.abandoned += 1;
                        self.keep(hold, "abandoned (connection broke while renewing)");
                    }
                    self.lost_connection();
                    return None;
                }
            }
        }
        if ended {
            self.fresh_generation();
        }
        Some(held)
    }

    /// Releases every key of a multi-key grant, one DLOCK.RELEASE each; once
    /// the connection breaks, the rest are left to their leases.
    fn release_each(&mut self, holds: Vec<Hold>) {
        let mut broken = false;
        for mut hold in holds {
            if broken {
                self.log.counters.abandoned += 1;
                self.keep(hold, "abandoned (connection broke while releasing)");
                continue;
            }
            let args = vec![
                "DLOCK.RELEASE".to_string(),
                key_name(hold.key),
                hold.owner.clone(),
            ];
            let (reply, sent, recv) = self.send(&args);
            match reply {
                Reply::Value(Value::Int(0)) => {
                    self.log.counters.releases += 1;
                    hold.holds = 0;
                    hold.given_up = Some(sent);
                    self.keep(hold, "released");
                }
                Reply::NotOwner => {
                    self.ended_by_server(&hold, recv, "RELEASE replied NOTOWNER");
                    self.keep(hold, "the server ended it (release)");
                }
                Reply::Broken => {
                    hold.given_up = Some(sent);
                    self.keep(hold, "its connection broke (release)");
                    broken = true;
                }
                Reply::Value(other) => {
                    self.violation(format!("{args:?} replied {other:?}"));
                    self.keep(hold, "release failed");
                }
                Reply::Failed(text) => {
                    self.violation(text);
                    self.keep(hold, "release failed");
                }
            }
        }
        if broken {
            self.lost_connection();
        }
    }
}

/// Many clients take random overlapping sets of keys, in random order, with
/// one atomic `DLOCK.MACQUIRE ... BLOCK` each, write to every key's fenced
/// resource, and release every key, under short leases and CLIENT KILLs.
/// The exclusive checker runs over the per-key holds: a token of its own per
/// hold, tokens growing with real time, no two certainly-live holds of a key,
/// no refused write from a live hold. Every waiter is answered by its BLOCK
/// timeout (plus a second for the load), and every one is answered at all
/// (BLOCK 0 included: a cycle of waiters would hang it), so the run is free
/// of deadlocks; at the end every key is free and nobody waits.
#[test]
fn clients_locking_overlapping_key_sets_never_break_exclusion_or_deadlock() {
    let mut settings = Settings::from_env();
    settings.secs = env_number("DLOCK_STRESS_SECS", 4);
    settings.keys = MULTI_KEYS;
    eprintln!(
        "stress multi-key: {} clients, {} s, {} keys, seed {} (DLOCK_STRESS_SEED to replay)",
        settings.clients, settings.secs, settings.keys, settings.seed
    );
    let server = Server::start();
    let mut conn = server.connect();
    let shared = Arc::new(Shared {
        port: server.port,
        settings,
        stop: AtomicBool::new(false),
        fences: (0..settings.keys).map(|_| Mutex::default()).collect(),
        conn_ids: (0..settings.clients).map(|_| AtomicI64::new(0)).collect(),
        generation: AtomicU64::new(0),
    });
    let started = Instant::now();
    let workers: Vec<_> = (0..settings.clients)
        .map(|index| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || Worker::new(index, shared).run_multi())
        })
        .collect();
    let killer = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || killer(shared))
    };
    while started.elapsed() < Duration::from_secs(settings.secs) {
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            workers.iter().all(|w| !w.is_finished()),
            "a worker stopped early (panicked?)"
        );
    }
    shared.stop.store(true, Ordering::Relaxed);
    // Every waiter finishes: a worker stuck in a wait cycle would not join
    // (its read timeout then flags it).
    let logs: Vec<WorkerLog> = workers
        .into_iter()
        .map(|w| w.join().expect("a worker panicked"))
        .collect();
    let kills = killer.join().expect("the killer panicked");
    let ran_for = started.elapsed();
    for key in 0..settings.keys {
        wait_until(&format!("{} to be free", key_name(key)), || {
            int(&mut conn, &["EXISTS", &key_name(key)]) == 0
        });
    }
    wait_for_blocked_clients(&mut conn, 0);

    let findings = check(&logs, &kills, &[], settings.keys);
    let mut counters = Counters::default();
    for log in &logs {
        counters.add(&log.counters);
    }
    let key_holds = logs.iter().map(|log| log.holds.len()).sum::<usize>();
    let mut fence_violations = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for fence in &shared.fences {
        let fence = fence.lock().unwrap();
        accepted += fence.accepted;
        refused += fence.refused;
        fence_violations.extend(fence.violations.iter().cloned());
    }
    eprintln!(
        "stress multi-key: ran {:.1} s; {} MACQUIREs, {} granted ({} after waiting, {key_holds} key holds), {} BLOCK timeouts, {} releases",
        ran_for.as_secs_f64(),
        counters.requests,
        counters.grants,
        counters.blocked_grants,
        counters.block_timeouts,
        counters.releases,
    );
    eprintln!(
        "stress multi-key: expiries seen {}, abandoned {}, kills {}, broken connections {}; server lease expiries {}; fenced writes accepted {accepted}, refused {refused} (stale holders); checked {} token orderings, {} hold windows",
        counters.expiries_seen,
        counters.abandoned,
        kills.len(),
        counters.disconnects,
        info_number(&mut conn, "dlock", "dlock_lease_expiries"),
        findings.pairs_ordered,
        findings.windows_checked,
    );
    let violations: Vec<String> = findings
        .violations
        .into_iter()
        .chain(fence_violations)
        .collect();
    eprintln!("stress multi-key: violations: {}", violations.len());
    assert!(
        violations.is_empty(),
        "{} violations (seed {}):\n{}",
        violations.len(),
        settings.seed,
        violations.join("\n")
    );
    assert!(counters.grants >= 100, "too little progress: {counters:?}");
    assert!(counters.blocked_grants > 0, "no hand-offs: {counters:?}");
    assert!(counters.expiries_seen > 0, "no lease ran out: {counters:?}");
    assert!(!kills.is_empty(), "no connection was killed");
}
