//! The bench's own pipelined load generator (scenarios 2 and 8): several
//! connections, each sending batches of units (one unit is one command or an
//! acquire + release pair on one fresh key) and checking every reply. Unlike
//! redis-benchmark it sends an acquire and its release to the same key, and
//! it fails the bench on any reply that is not the expected one.

use std::fmt::Write as _;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::resp::{Conn, Reply};
use crate::scripts::Scripts;
use crate::server::Server;
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
    /// DLOCK.ACQUIRE k o ttl alone (the lock stays)
    Acquire,
    /// SET k o NX PX ttl alone (the key stays)
    SetNx,
    /// GET k (a key that does not exist)
    Get,
    /// INCR k (a key that does not exist)
    Incr,
}

impl Op {
    /// Commands per unit.
    pub fn len(self) -> usize {
        match self {
            Op::Acquire | Op::SetNx | Op::Get | Op::Incr => 1,
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
            Op::Acquire => "DLOCK.ACQUIRE k o 30000",
            Op::SetNx => "SET k o NX PX 30000",
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
            (Op::SetNxDel | Op::SetNxCad, 0) | (Op::SetNx, _) => {
                conn.queue(&["SET", key, owner, "NX", "PX", TTL])
            }
            (Op::SetNxDel, _) => conn.queue(&["DEL", key]),
            (Op::SetNxCad, _) => {
                conn.queue(&["EVALSHA", &scripts.compare_and_delete, "1", key, owner])
            }
            (Op::LuaPair, 0) => conn.queue(&["EVALSHA", &scripts.lock, "1", key, TTL, owner]),
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
            (Op::DlockPair, 0) | (Op::Acquire, _) => reply.is_grant(),
            (Op::DlockPair, _) => reply.as_int() == Some(0),
            (Op::SetNxDel | Op::SetNxCad, 0) | (Op::SetNx, _) => reply.is_ok(),
            (Op::SetNxDel | Op::SetNxCad, _) => reply.as_int() == Some(1),
            (Op::LuaPair, 0) => reply.is_nil(),
            (Op::LuaPair, _) => reply.as_int() == Some(1),
            (Op::Get, _) => reply.is_nil(),
            (Op::Incr, _) => reply.as_int() == Some(1),
        }
    }
}

/// Units per second of `op` from `connections` connections, each sending
/// batches of `pipeline` units (with a pipeline of 1 every command waits
/// for the previous reply) for `duration`. Keys are `<tag>:<connection>:<n>`,
/// never used before in the run.
pub fn rate(
    server: &Server,
    scripts: &Scripts,
    op: Op,
    connections: usize,
    pipeline: usize,
    duration: Duration,
    tag: &str,
) -> Res<f64> {
    let barrier = Barrier::new(connections);
    let results: Vec<Res<(u64, Duration)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..connections)
            .map(|index| {
                let barrier = &barrier;
                scope.spawn(move || -> Res<(u64, Duration)> {
                    let conn = server.conn();
                    let owner = format!("owner-{index}");
                    barrier.wait();
                    let mut conn = conn?;
                    let mut key = String::new();
                    let start = Instant::now();
                    let deadline = start + duration;
                    let mut units = 0u64;
                    while Instant::now() < deadline {
                        if pipeline <= 1 {
                            key.clear();
                            let _ = write!(key, "{tag}:{index}:{units}");
                            for step in 0..op.len() {
                                op.queue(step, &mut conn, scripts, &key, &owner);
                                conn.flush()?;
                                let reply = conn.read()?;
                                if !op.check(step, &reply) {
                                    bail!("{op:?} command {step} on {key}: unexpected reply {reply:?}");
                                }
                            }
                            units += 1;
                            continue;
                        }
                        for i in 0..pipeline as u64 {
                            key.clear();
                            let _ = write!(key, "{tag}:{index}:{}", units + i);
                            for step in 0..op.len() {
                                op.queue(step, &mut conn, scripts, &key, &owner);
                            }
                        }
                        conn.flush()?;
                        for _ in 0..pipeline {
                            for step in 0..op.len() {
                                let reply = conn.read()?;
                                if !op.check(step, &reply) {
                                    bail!("{op:?} command {step}: unexpected reply {reply:?}");
                                }
                            }
                        }
                        units += pipeline as u64;
                    }
                    Ok((units, start.elapsed()))
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
    let mut total = 0u64;
    let mut longest = Duration::ZERO;
    for result in results {
        let (units, elapsed) = result?;
        total += units;
        longest = longest.max(elapsed);
    }
    Ok(total as f64 / longest.as_secs_f64())
}
