//! Scenario 13 (issue 12): atomic multi-key acquire. 16 clients, each in a
//! loop locking 4 of 16 keys chosen at random, in random order, then
//! releasing them; dlock's `DLOCK.MACQUIRE 4 k.. o ttl BLOCK t` against
//! RedissonMultiLock's algorithm over the Lua re-entrant lock: the keys
//! taken one by one in the given order, each waited for (pub/sub and PTTL)
//! up to the time left of the attempt; when one cannot be had in time,
//! every key taken is released and the attempt starts again from the first
//! key.
//!
//! Every client checks, per key, that no other client holds a key it was
//! granted: a violation fails the bench. A multi-lock still waiting when
//! the run ends counts in the waits with the time it had waited.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use super::{expect, flushall, has_command, skipped, Rng};
use crate::report::{Section, Table, Target};
use crate::resp::{Conn, Reply};
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{as_ms, median, percentile_sorted, ratio, thousands, times};
use crate::{bail, Config, Res};

const CLIENTS: usize = 16;
const KEYS: usize = 16;
const PER_LOCK: usize = 4;
/// dlock's lease and BLOCK timeout (a safety net).
const TTL: &str = "10000";
const BLOCK_MS: &str = "5000";
/// RedissonMultiLock.lock(leaseTime) with a lease of 4 s (between its 2 s
/// floor and 1.5 s per key) makes attempts of a wait drawn once per call
/// from [lease / 2, lease), holds each key with twice that wait while it
/// takes the others, then sets every key's lease to the lease asked for.
const REDISSON_LEASE: u64 = 4000;
const REDISSON_LEASE_MS: &str = "4000";
const TARGET_RATE: &str =
    "multi-key: multi-locks/s, dlock / RedissonMultiLock's algorithm (issue 12)";
const TARGET_P99: &str =
    "multi-key: p99 wait, dlock below RedissonMultiLock's algorithm (issue 12)";
const TITLE: &str = "Atomic multi-key acquire: 16 clients, 4 of 16 keys each";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Design {
    Dlock,
    Redisson,
}

fn key_name(run: &str, k: usize) -> String {
    format!("multi:{run}:{k}")
}

struct Client<'a> {
    design: Design,
    conn: Conn,
    sub: Option<Conn>,
    owner: String,
    /// key names and their unlock channels, by key number
    keys: Vec<String>,
    channels: Vec<String>,
    scripts: &'a Scripts,
    rng: Rng,
    /// Redisson: each key's lease while the others are taken (2 x the wait).
    hold_ms: String,
}

impl Client<'_> {
    /// Takes every key of `chosen` (in that order); false when the run ended first.
    fn acquire(&mut self, chosen: &[usize], deadline: Instant) -> Res<bool> {
        match self.design {
            Design::Dlock => loop {
                let mut args: Vec<&str> = vec!["DLOCK.MACQUIRE"];
                let count = chosen.len().to_string();
                args.push(&count);
                for &k in chosen {
                    args.push(&self.keys[k]);
                }
                args.extend([self.owner.as_str(), TTL, "BLOCK", BLOCK_MS]);
                let reply = self.conn.call(&args)?;
                if let Some(grants) = reply.as_array() {
                    if grants.len() == chosen.len() && grants.iter().all(Reply::is_grant) {
                        return Ok(true);
                    }
                }
                expect("DLOCK.MACQUIRE BLOCK", &reply, reply.is_nil())?;
                if Instant::now() >= deadline {
                    return Ok(false);
                }
            },
            Design::Redisson => loop {
                // lock(leaseTime): one wait for every tryLock(wait, lease) attempt.
                let wait_ms = REDISSON_LEASE / 2 + self.rng.below(REDISSON_LEASE / 2);
                self.hold_ms = (2 * wait_ms).to_string();
                let attempt_end = (Instant::now() + Duration::from_millis(wait_ms)).min(deadline);
                let mut taken: Vec<usize> = Vec::new();
                let mut i = 0;
                while i < chosen.len() {
                    let k = chosen[i];
                    if self.lock_one(k, attempt_end)? {
                        taken.push(k);
                        i += 1;
                    } else {
                        // Roll back and start again from the first key.
                        self.unlock(&taken)?;
                        taken.clear();
                        i = 0;
                    }
                    if Instant::now() >= attempt_end && taken.len() < chosen.len() {
                        self.unlock(&taken)?;
                        taken.clear();
                        break;
                    }
                }
                if taken.len() == chosen.len() {
                    // The lease asked for, on every key.
                    for &k in &taken {
                        self.conn
                            .queue(&["PEXPIRE", &self.keys[k], REDISSON_LEASE_MS]);
                    }
                    self.conn.flush()?;
                    for _ in &taken {
                        let reply = self.conn.read()?;
                        expect("PEXPIRE", &reply, reply.as_int() == Some(1))?;
                    }
                    return Ok(true);
                }
                if Instant::now() >= deadline {
                    return Ok(false);
                }
            },
        }
    }

    /// RedissonLock.tryLock(wait, lease) on one key: false when `until` passes.
    fn lock_one(&mut self, k: usize, until: Instant) -> Res<bool> {
        let sub = self.sub.as_mut().ok_or("no subscription")?;
        loop {
            // Messages published before this attempt are stale.
            while sub.wait_readable(None)? {
                sub.read()?;
            }
            let reply = self.conn.call(&[
                "EVALSHA",
                &self.scripts.lock,
                "1",
                &self.keys[k],
                &self.hold_ms,
                &self.owner,
            ])?;
            let pttl = match reply {
                Reply::Nil => return Ok(true),
                Reply::Int(pttl) => pttl,
                other => bail!("lock script: unexpected reply {other:?}"),
            };
            // Wait for this key's unlock message, or its PTTL, or the end.
            let give_up = until;
            let retry_at = Instant::now() + Duration::from_millis(pttl.max(0) as u64);
            loop {
                let now = Instant::now();
                if now >= give_up {
                    return Ok(false);
                }
                let wake = retry_at.min(give_up);
                if now >= wake {
                    break;
                }
                if !sub.wait_readable(Some(wake - now))? {
                    break;
                }
                let message = sub.read()?;
                let for_this_key = matches!(
                    message.as_array(),
                    Some([_, Reply::Bulk(channel), _]) if channel == self.channels[k].as_bytes()
                );
                if for_this_key {
                    break;
                }
            }
        }
    }

    fn unlock(&mut self, taken: &[usize]) -> Res<()> {
        for &k in taken {
            match self.design {
                Design::Dlock => self
                    .conn
                    .queue(&["DLOCK.RELEASE", &self.keys[k], &self.owner]),
                Design::Redisson => self.conn.queue(&[
                    "EVALSHA",
                    &self.scripts.unlock,
                    "2",
                    &self.keys[k],
                    &self.channels[k],
                    "0",
                    REDISSON_LEASE_MS,
                    &self.owner,
                ]),
            }
        }
        self.conn.flush()?;
        for _ in taken {
            let reply = self.conn.read()?;
            let released = match self.design {
                Design::Dlock => reply.as_int() == Some(0),
                Design::Redisson => reply.as_int() == Some(1),
            };
            expect("unlock", &reply, released)?;
        }
        Ok(())
    }
}

struct RunResult {
    completed: u64,
    seconds: f64,
    /// Waits in ms (censored ones included), sorted.
    waits: Vec<f64>,
}

fn run_once(
    server: &Server,
    scripts: &Scripts,
    design: Design,
    duration: Duration,
    run: &str,
    seed: u64,
) -> Res<RunResult> {
    let holders: Vec<AtomicUsize> = (0..KEYS).map(|_| AtomicUsize::new(0)).collect();
    let violations = AtomicUsize::new(0);
    let deadline_cell: OnceLock<Instant> = OnceLock::new();
    let ready = Barrier::new(CLIENTS + 1);
    let go = Barrier::new(CLIENTS + 1);
    let keys: Vec<String> = (0..KEYS).map(|k| key_name(run, k)).collect();
    let channels: Vec<String> = keys
        .iter()
        .map(|k| format!("redisson_lock__channel:{{{k}}}"))
        .collect();
    let results: Vec<Res<(u64, Vec<f64>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|index| {
                let (holders, violations, deadline_cell, ready, go) =
                    (&holders, &violations, &deadline_cell, &ready, &go);
                let (keys, channels) = (&keys, &channels);
                scope.spawn(move || -> Res<(u64, Vec<f64>)> {
                    let connect = || -> Res<Client> {
                        let sub = if design == Design::Redisson {
                            let mut sub = server.conn()?;
                            let mut args = vec!["SUBSCRIBE"];
                            args.extend(channels.iter().map(String::as_str));
                            sub.queue(&args);
                            sub.flush()?;
                            for _ in channels {
                                let reply = sub.read()?;
                                expect(
                                    "SUBSCRIBE",
                                    &reply,
                                    reply.as_array().is_some_and(|a| a.len() == 3),
                                )?;
                            }
                            Some(sub)
                        } else {
                            None
                        };
                        Ok(Client {
                            design,
                            conn: server.conn()?,
                            sub,
                            owner: format!("client-{index}"),
                            keys: keys.clone(),
                            channels: channels.clone(),
                            scripts,
                            rng: Rng::new(seed * 1000 + index as u64 + 99),
                            hold_ms: String::new(),
                        })
                    };
                    let client = connect();
                    ready.wait();
                    go.wait();
                    let mut client = client?;
                    let deadline = *deadline_cell.get().ok_or("no deadline")?;
                    let me = index + 1;
                    let mut rng = Rng::new(seed * 1000 + index as u64 + 7);
                    let (mut completed, mut waits) = (0u64, Vec::new());
                    while Instant::now() < deadline {
                        // 4 distinct keys in random order (partial Fisher-Yates).
                        let mut all: Vec<usize> = (0..KEYS).collect();
                        for i in 0..PER_LOCK {
                            let j = i + rng.below((KEYS - i) as u64) as usize;
                            all.swap(i, j);
                        }
                        let chosen = &all[..PER_LOCK];
                        let start = Instant::now();
                        let got = client.acquire(chosen, deadline)?;
                        let granted = Instant::now();
                        if !got || granted > deadline {
                            waits.push(as_ms(deadline.saturating_duration_since(start)));
                            if got {
                                client.unlock(chosen)?;
                            }
                            break;
                        }
                        for &k in chosen {
                            if holders[k]
                                .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
                                .is_err()
                            {
                                violations.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        completed += 1;
                        waits.push(as_ms(granted - start));
                        for &k in chosen {
                            let _ = holders[k].compare_exchange(
                                me,
                                0,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            );
                        }
                        client.unlock(chosen)?;
                    }
                    Ok((completed, waits))
                })
            })
            .collect();
        ready.wait();
        let _ = deadline_cell.set(Instant::now() + duration);
        go.wait();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client thread panicked".into()))
            })
            .collect()
    });
    let (mut completed, mut waits) = (0u64, Vec::new());
    for result in results {
        let (c, w) = result?;
        completed += c;
        waits.extend(w);
    }
    let violations = violations.load(Ordering::SeqCst);
    if violations > 0 {
        bail!("multi-key: {violations} keys granted while another client held them");
    }
    waits.sort_by(|a, b| a.total_cmp(b));
    Ok(RunResult {
        completed,
        seconds: duration.as_secs_f64(),
        waits,
    })
}

pub fn run(config: &Config) -> Res<Section> {
    let server = Server::start(config, &[])?;
    let mut conn = server.conn()?;
    if !has_command(&mut conn, "dlock.macquire")? {
        return Ok(skipped(
            13,
            TITLE,
            "this server has no DLOCK.MACQUIRE yet (issue 12)",
            &[(TARGET_RATE, ">= 3.00x"), (TARGET_P99, "< Redisson's")],
        ));
    }
    let scripts = Scripts::load(&mut conn)?;
    let reps = config.pick(1, 3);
    let duration = Duration::from_millis(config.pick(500, 5000));
    let designs = [Design::Dlock, Design::Redisson];
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(), Vec::new()];
    for rep in 0..reps {
        for k in 0..designs.len() {
            let d = (rep + k) % designs.len();
            flushall(&mut conn)?;
            runs[d].push(run_once(
                &server,
                &scripts,
                designs[d],
                duration,
                &rep.to_string(),
                rep as u64,
            )?);
        }
    }
    let rate = |r: &RunResult| r.completed as f64 / r.seconds;
    let p = |d: usize, q: f64| {
        median(
            &runs[d]
                .iter()
                .map(|r| percentile_sorted(&r.waits, q))
                .collect::<Vec<_>>(),
        )
    };
    let paired_rate = median(
        &runs[0]
            .iter()
            .zip(&runs[1])
            .map(|(a, b)| ratio(rate(a), rate(b)))
            .collect::<Vec<_>>(),
    );
    let mut section = Section::new(13, TITLE);
    section.about = format!(
        "{CLIENTS} clients (one thread and connection each) loop for {:.1} s: choose \
         {PER_LOCK} of {KEYS} keys at random, in random order, lock them all, no work, \
         release them. dlock: `DLOCK.MACQUIRE {PER_LOCK} k1 k2 k3 k4 o {TTL} BLOCK \
         {BLOCK_MS}` (every key's queue joined in one step), then a pipelined \
         `DLOCK.RELEASE` per key. Redisson: RedissonMultiLock's algorithm \
         (`lock(leaseTime = {REDISSON_LEASE_MS} ms)`: attempts of a wait drawn from \
         [{} ms, {REDISSON_LEASE_MS} ms), each key held with twice the wait meanwhile; \
         the keys taken one by one with the Lua re-entrant lock, each waited for by \
         pub/sub and PTTL up to the time left of the attempt; on a key not had in time, \
         every key taken is released and the attempt starts again; once all are held, \
         each gets `PEXPIRE {REDISSON_LEASE_MS}`; release: the unlock script per key). \
         The wait runs from the start of a multi-lock to its last grant; a multi-lock \
         still waiting when the run ends counts with the time it had waited. Runs per \
         design: {reps}, interleaved; medians, ratios of back-to-back runs.",
        duration.as_secs_f64(),
        REDISSON_LEASE / 2,
    );
    let mut table = Table::new(
        "",
        &[
            "design",
            "multi-locks/s",
            "p50 wait",
            "p99 wait",
            "multi-locks vs Redisson",
        ],
    );
    for (d, name) in [
        "dlock: DLOCK.MACQUIRE BLOCK",
        "RedissonMultiLock's algorithm (Lua, pub/sub)",
    ]
    .iter()
    .enumerate()
    {
        table.row(vec![
            name.to_string(),
            thousands(median(&runs[d].iter().map(rate).collect::<Vec<_>>())),
            format!("{:.3} ms", p(d, 50.0)),
            format!("{:.3} ms", p(d, 99.0)),
            times(if d == 0 { paired_rate } else { 1.0 }),
        ]);
    }
    section.tables.push(table);
    let redisson_completed: u64 = runs[1].iter().map(|r| r.completed).sum();
    let dlock_completed: u64 = runs[0].iter().map(|r| r.completed).sum();
    if redisson_completed == 0 && dlock_completed > 0 {
        section.targets.push(Target {
            what: TARGET_RATE.into(),
            measured: "inf (Redisson's algorithm completed none)".into(),
            goal: ">= 3.00x".into(),
            met: true,
        });
    } else if !paired_rate.is_finite() {
        // Some runs of Redisson's algorithm completed none (a ratio with no
        // denominator): compare what each design completed over all runs.
        let over_all = dlock_completed as f64 / redisson_completed.max(1) as f64;
        section.targets.push(Target {
            what: TARGET_RATE.into(),
            measured: format!(
                "{over_all:.0}x ({dlock_completed} against {redisson_completed} multi-locks over all runs; some runs of Redisson's algorithm completed none)"
            ),
            goal: ">= 3.00x".into(),
            met: over_all >= 3.0,
        });
    } else {
        section
            .targets
            .push(Target::at_least(TARGET_RATE, paired_rate, 3.0));
    }
    section.targets.push(Target {
        what: TARGET_P99.into(),
        measured: format!("{:.3} ms vs {:.3} ms", p(0, 99.0), p(1, 99.0)),
        goal: "< Redisson's".into(),
        met: p(0, 99.0) < p(1, 99.0),
    });
    section.notes.push(
        "Two clients that take overlapping keys in different orders each hold a key the \
         other waits for; in the client-side algorithm both wait until one attempt runs \
         out, while dlock's single step queues a multi-key waiter in every key's queue at \
         once, so no such cycle can form."
            .into(),
    );
    section.commands = vec![
        "target/release/dlock-bench --only 13   # per client, in a loop until the run ends (k<i>: 4 of 16 keys in random order):".into(),
        format!("#   dlock:    DLOCK.MACQUIRE 4 k1 k2 k3 k4 client-<i> {TTL} BLOCK {BLOCK_MS} ; DLOCK.RELEASE k<j> client-<i> (x4, pipelined)"),
        format!("#   Redisson: SUBSCRIBE redisson_lock__channel:{{k}} (all 16, once) ; for each key in order: EVALSHA <lock> 1 k <2 x wait> client-<i> -> nil or PTTL, wait, retry (rollback: EVALSHA <unlock> on every key taken) ; PEXPIRE k {REDISSON_LEASE_MS} (x4) ; EVALSHA <unlock> 2 k redisson_lock__channel:{{k}} 0 {REDISSON_LEASE_MS} client-<i> (x4)"),
    ];
    Ok(section)
}
