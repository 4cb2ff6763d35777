//! The bench's own pipelined load generator (scenarios 2 and 8): several
//! connections, each sending batches of units (one unit is one command or an
//! acquire + release pair on one fresh key) and checking every reply. Unlike
//! redis-benchmark it sends an acquire and its release to the same key, and
//! it fails the bench on any reply that is not the expected one.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::resp::{Conn, Reply};
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{median, percentile, ratio, times};
use crate::{bail, Res};

/// Lease of every lock the generator takes (far longer than a run).
pub const TTL: &str = "30000";

/// One unit of work on one fresh key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    /// DLOCK.ACQUIRE k o ttl ; DLOCK.RELEASE k o
    DlockPair,
    /// SET k o NX PX ttl ; DEL k (the unsafe lock: the floor of any lock)
    SetNxDel,
    /// SET k o NX PX ttl ; EVALSHA <compare-and-delete> 1 k o
    SetNxCad,
    /// EVALSHA <lock> 1 k ttl o ; EVALSHA <unlock> 2 k unlock:k 0 ttl o
    LuaPair,
    /// FLOOR.ACQUIRE k o ttl ; FLOOR.RELEASE k o (the floor module: a
    /// lock's Redis calls and nothing else, see bench/floor)
    FloorPair,
    /// DLOCK.ACQUIRE k o ttl alone (the lock stays)
    Acquire,
    /// FLOOR.ACQUIRE k o ttl alone (the lock stays)
    FloorAcquire,
    /// SET k o NX PX ttl alone (the key stays)
    SetNx,
    /// EVALSHA <lock> 1 k ttl o alone (the lock stays)
    LuaAcquire,
    /// GET k (a key that does not exist)
    Get,
    /// INCR k (a key that does not exist)
    Incr,
}

impl Op {
    /// Commands per unit.
    pub fn len(self) -> usize {
        match self {
            Op::Acquire | Op::FloorAcquire | Op::SetNx | Op::LuaAcquire | Op::Get | Op::Incr => 1,
            _ => 2,
        }
    }

    /// The unit's commands, as written in the report (`k` the key, `o` the owner).
    pub fn commands(self) -> &'static str {
        match self {
            Op::DlockPair => "DLOCK.ACQUIRE k o 30000 ; DLOCK.RELEASE k o",
            Op::SetNxDel => "SET k o NX PX 30000 ; DEL k",
            Op::SetNxCad => "SET k o NX PX 30000 ; EVALSHA <compare-and-delete> 1 k o",
            Op::LuaPair => "EVALSHA <lock> 1 k 30000 o ; EVALSHA <unlock> 2 k unlock:k 0 30000 o",
            Op::FloorPair => "FLOOR.ACQUIRE k o 30000 ; FLOOR.RELEASE k o",
            Op::Acquire => "DLOCK.ACQUIRE k o 30000",
            Op::FloorAcquire => "FLOOR.ACQUIRE k o 30000",
            Op::SetNx => "SET k o NX PX 30000",
            Op::LuaAcquire => "EVALSHA <lock> 1 k 30000 o",
            Op::Get => "GET k",
            Op::Incr => "INCR k",
        }
    }

    /// Queues command `step` of the unit on `key`.
    pub fn queue(self, step: usize, conn: &mut Conn, scripts: &Scripts, key: &str, owner: &str) {
        match (self, step) {
            (Op::DlockPair, 0) | (Op::Acquire, _) => {
                conn.queue(&["DLOCK.ACQUIRE", key, owner, TTL])
            }
            (Op::DlockPair, _) => conn.queue(&["DLOCK.RELEASE", key, owner]),
            (Op::FloorPair, 0) | (Op::FloorAcquire, _) => {
                conn.queue(&["FLOOR.ACQUIRE", key, owner, TTL])
            }
            (Op::FloorPair, _) => conn.queue(&["FLOOR.RELEASE", key, owner]),
            (Op::SetNxDel | Op::SetNxCad, 0) | (Op::SetNx, _) => {
                conn.queue(&["SET", key, owner, "NX", "PX", TTL])
            }
            (Op::SetNxDel, _) => conn.queue(&["DEL", key]),
            (Op::SetNxCad, _) => {
                conn.queue(&["EVALSHA", &scripts.compare_and_delete, "1", key, owner])
            }
            (Op::LuaPair, 0) | (Op::LuaAcquire, _) => {
                conn.queue(&["EVALSHA", &scripts.lock, "1", key, TTL, owner])
            }
            (Op::LuaPair, _) => {
                let channel = format!("unlock:{key}");
                conn.queue(&[
                    "EVALSHA",
                    &scripts.unlock,
                    "2",
                    key,
                    &channel,
                    "0",
                    TTL,
                    owner,
                ])
            }
            (Op::Get, _) => conn.queue(&["GET", key]),
            (Op::Incr, _) => conn.queue(&["INCR", key]),
        }
    }

    /// Whether `reply` is the expected reply of command `step`.
    pub fn check(self, step: usize, reply: &Reply) -> bool {
        match (self, step) {
            (Op::DlockPair | Op::FloorPair, 0) | (Op::Acquire | Op::FloorAcquire, _) => {
                reply.is_grant()
            }
            (Op::DlockPair | Op::FloorPair, _) => reply.as_int() == Some(0),
            (Op::SetNxDel | Op::SetNxCad, 0) | (Op::SetNx, _) => reply.is_ok(),
            (Op::SetNxDel | Op::SetNxCad, _) => reply.as_int() == Some(1),
            (Op::LuaPair, 0) | (Op::LuaAcquire, _) => reply.is_nil(),
            (Op::LuaPair, _) => reply.as_int() == Some(1),
            (Op::Get, _) => reply.is_nil(),
            (Op::Incr, _) => reply.as_int() == Some(1),
        }
    }

    /// Whether a unit leaves its key behind (an acquire without its release,
    /// an INCR): the keyspace of such a run is flushed between rounds.
    pub fn leaves_keys(self) -> bool {
        matches!(
            self,
            Op::Acquire | Op::FloorAcquire | Op::SetNx | Op::LuaAcquire | Op::Incr
        )
    }
}

/// One design of an interleaved comparison: units of `op` on `server`.
#[derive(Clone, Copy)]
pub struct Case<'a> {
    pub server: &'a Server,
    pub scripts: &'a Scripts,
    pub op: Op,
}

/// The slice of interleaved comparisons: short enough that the cases of a
/// round share the host's bursts of noise (measured: with slices of 1 s,
/// two servers running the same commands differed by 0.90x to 1.12x; with
/// slices of 20 ms, 150 rounds, by 0.99x to 1.01x), long enough that the
/// switch between cases (a barrier, the first batch) is a small part.
pub const SLICE: Duration = Duration::from_millis(20);

/// How an interleaved comparison runs.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub connections: usize,
    /// Units per batch; 1: every command waits for the previous reply.
    pub pipeline: usize,
    /// How long every connection sends one case's units before all switch
    /// to the next case.
    pub slice: Duration,
    /// Rounds: each runs every case once, the starting case rotating.
    pub rounds: usize,
}

/// The rates of an interleaved comparison: `rates[case][round]`, units/s.
pub struct Rates(pub Vec<Vec<f64>>);

impl Rates {
    /// The median over the rounds of the rate of `a` over the rate of `b`
    /// in the same round (the two measured at most one round apart).
    pub fn ratio(&self, a: usize, b: usize) -> f64 {
        let ratios: Vec<f64> = self.0[a]
            .iter()
            .zip(&self.0[b])
            .map(|(x, y)| ratio(*x, *y))
            .collect();
        median(&ratios)
    }

    /// The middle half of those per-round ratios, as `0.95x-1.04x`: how
    /// far a single round can be trusted.
    pub fn ratio_spread(&self, a: usize, b: usize) -> String {
        let ratios: Vec<f64> = self.0[a]
            .iter()
            .zip(&self.0[b])
            .map(|(x, y)| ratio(*x, *y))
            .collect();
        format!(
            "{}-{}",
            times(percentile(&ratios, 25.0)),
            times(percentile(&ratios, 75.0))
        )
    }

    /// The median rate of `case`.
    pub fn median(&self, case: usize) -> f64 {
        median(&self.0[case])
    }
}

/// Runs `cases` interleaved in short slices: `plan.connections` threads,
/// each with a connection per case, all on the same case at once and all
/// switching together at the end of each slice (a barrier), every case
/// once per round. Host noise on a shared machine comes in bursts of
/// seconds; cases measured a few tens of milliseconds apart, many times
/// over, see the same bursts, so the per-round ratios are steadier than
/// those of runs of a second each. A slice's rate is its units over the
/// time from its first connection's start to its last one's end. Keys are
/// `<tag>:<case>:<round>:<connection>:<n>`, each new; between slices one
/// connection checks or flushes the keyspace (`after_slice`).
pub fn interleaved(cases: &[Case], plan: Plan, tag: &str) -> Res<Rates> {
    let barrier = Barrier::new(plan.connections);
    let failed = AtomicBool::new(false);
    let results: Vec<Res<Vec<Vec<Slice>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.connections)
            .map(|index| {
                let barrier = &barrier;
                let failed = &failed;
                scope.spawn(move || -> Res<Vec<Vec<Slice>>> {
                    // Every thread passes every barrier, even after an error
                    // (its own or another's), so that none waits for ever;
                    // once one fails, the others stop sending.
                    let mut outcome = cases
                        .iter()
                        .map(|c| c.server.conn())
                        .collect::<Res<Vec<Conn>>>()
                        .map(|conns| (conns, vec![Vec::with_capacity(plan.rounds); cases.len()]));
                    barrier.wait();
                    let owner = format!("owner-{index}");
                    let mut key = String::new();
                    for round in 0..plan.rounds {
                        for k in 0..cases.len() {
                            let number = (round + k) % cases.len();
                            let case = cases[number];
                            barrier.wait();
                            if let Ok((conns, slices)) = &mut outcome {
                                if !failed.load(Ordering::Relaxed) {
                                    let prefix = format!("{tag}:{number}:{round}:{index}");
                                    let conn = &mut conns[number];
                                    match slice(case, conn, plan, &prefix, &owner, &mut key) {
                                        Ok(measured) => slices[number].push(measured),
                                        Err(e) => outcome = Err(e),
                                    }
                                }
                            }
                            if outcome.is_err() {
                                failed.store(true, Ordering::Relaxed);
                            }
                            barrier.wait();
                            if let (0, Ok((conns, _))) = (index, &mut outcome) {
                                if !failed.load(Ordering::Relaxed) {
                                    if let Err(e) = after_slice(case, &mut conns[number]) {
                                        outcome = Err(e);
                                        failed.store(true, Ordering::Relaxed);
                                    }
                                }
                            }
                        }
                    }
                    outcome.map(|(_, slices)| slices)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client thread panicked".into()))
            })
            .collect()
    });
    let mut per_thread = Vec::new();
    let mut first_error = None;
    for result in results {
        match result {
            Ok(slices) => per_thread.push(slices),
            // Only a thread that failed returns an error (those that
            // stopped because of it return their slices so far).
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let mut rates = vec![Vec::with_capacity(plan.rounds); cases.len()];
    for (case, rates) in rates.iter_mut().enumerate() {
        for round in 0..plan.rounds {
            let slices = per_thread.iter().map(|thread| thread[case][round]);
            let units: u64 = slices.clone().map(|s| s.0).sum();
            let first = slices.clone().map(|s| s.1).min();
            let last = slices.map(|s| s.2).max();
            let seconds = match (first, last) {
                (Some(first), Some(last)) => (last - first).as_secs_f64(),
                _ => 0.0,
            };
            rates.push(ratio(units as f64, seconds));
        }
    }
    if std::env::var_os("DLOCK_BENCH_TRACE").is_some() {
        for (case, rates) in rates.iter().enumerate() {
            let text: Vec<String> = rates.iter().map(|r| format!("{:.0}", r / 1000.0)).collect();
            eprintln!("{tag} case {case}: {}", text.join(" "));
        }
    }
    Ok(Rates(rates))
}

/// The units, start and end of one connection's slice.
type Slice = (u64, Instant, Instant);

/// One connection's share of one slice: batches of `case`'s units until
/// `plan.slice` has passed, every reply checked.
fn slice(
    case: Case,
    conn: &mut Conn,
    plan: Plan,
    prefix: &str,
    owner: &str,
    key: &mut String,
) -> Res<Slice> {
    let start = Instant::now();
    let deadline = start + plan.slice;
    let batch = plan.pipeline.max(1);
    let mut units = 0u64;
    while Instant::now() < deadline {
        for i in 0..batch as u64 {
            key.clear();
            let _ = write!(key, "{prefix}:{}", units + i);
            for step in 0..case.op.len() {
                case.op.queue(step, conn, case.scripts, key, owner);
                if batch == 1 {
                    conn.flush()?;
                    check(case.op, step, &conn.read()?)?;
                }
            }
        }
        if batch > 1 {
            conn.flush()?;
            for _ in 0..batch {
                for step in 0..case.op.len() {
                    check(case.op, step, &conn.read()?)?;
                }
            }
        }
        units += batch as u64;
    }
    Ok((units, start, Instant::now()))
}

fn check(op: Op, step: usize, reply: &Reply) -> Res<()> {
    if op.check(step, reply) {
        Ok(())
    } else {
        bail!("{op:?} command {step}: unexpected reply {reply:?}")
    }
}

/// After a slice: a case whose units free their keys must have left none;
/// the keys of one that leaves them are flushed, so that every slice starts
/// on an empty keyspace (a keyspace grown by the slices before would make a
/// slice's cost depend on its place in the round: the dictionary's
/// rehashing steps fall in different slices).
fn after_slice(case: Case, conn: &mut Conn) -> Res<()> {
    if case.op.leaves_keys() {
        return super::flushall(conn);
    }
    let left = conn.call(&["DBSIZE"])?;
    if left.as_int() != Some(0) {
        bail!("{:?}: {left:?} keys left after a slice", case.op);
    }
    Ok(())
}
