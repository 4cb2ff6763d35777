//! Scenario 5: lease-expiry hand-off delay. A holder takes the lock with a
//! short lease and never releases it; one waiter waits. The delay is the
//! time the waiter's grant arrives (wall clock) minus the lease deadline
//! (PEXPIRETIME of the key, read right after the holder's acquire).
//!
//! dlock: the waiter is `DLOCK.ACQUIRE .. BLOCK`. References: the pub/sub
//! design (the waiter sleeps for the PTTL the lock script returned, then
//! retries; no one publishes when a lease runs out) and polling SET NX
//! every 10 ms.

use std::time::{Duration, Instant, SystemTime};

use super::{expect, flushall, wait_for_waiting, wall_ms};
use crate::report::{Section, Table, Target};
use crate::resp::{Conn, Reply};
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{as_ms, percentile, ratio, times};
use crate::{bail, sys, Config, Res};

/// The holder's lease.
const LEASE_MS: &str = "40";
/// The waiter's lease once it has the lock (it releases at once).
const WAITER_TTL: &str = "5000";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Design {
    Block,
    PubSub,
    Poll10,
}

impl Design {
    const ALL: [Design; 3] = [Design::Block, Design::PubSub, Design::Poll10];

    fn name(self) -> &'static str {
        match self {
            Design::Block => "dlock BLOCK",
            Design::PubSub => "pub/sub (Lua): sleep the PTTL, retry",
            Design::Poll10 => "polling SET NX every 10 ms",
        }
    }
}

struct Clients {
    holder: Conn,
    waiter: Conn,
    sub: Conn,
}

/// A pseudo-random number of µs below `bound` (from the clock's low bits).
fn jitter_us(bound: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut x = u64::from(nanos) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x % bound
}

/// One round's figures, in ms after the lease deadline (`PEXPIRETIME`).
struct Delay {
    /// The waiter's grant received.
    received: f64,
    /// dlock only: the grant made in the server, read from its fencing
    /// token (a token is at least the server's clock in µs when issued, and
    /// nothing else issues tokens during the round).
    granted: Option<f64>,
}

/// The delays between the lease deadline and the waiter's grant.
fn round(design: Design, clients: &mut Clients, scripts: &Scripts, key: &str) -> Res<Delay> {
    let channel = format!("unlock:{key}");
    let Clients {
        holder,
        waiter,
        sub,
    } = clients;
    // The holder takes the lock with a short lease and never releases it.
    let taken = match design {
        Design::Block => holder
            .call(&["DLOCK.ACQUIRE", key, "holder", LEASE_MS])?
            .is_grant(),
        Design::PubSub => holder
            .call(&["EVALSHA", &scripts.lock, "1", key, LEASE_MS, "holder"])?
            .is_nil(),
        Design::Poll10 => holder
            .call(&["SET", key, "holder", "NX", "PX", LEASE_MS])?
            .is_ok(),
    };
    if !taken {
        bail!("{}: the holder did not get the lock", design.name());
    }
    let deadline = holder
        .call(&["PEXPIRETIME", key])?
        .as_int()
        .filter(|t| *t > 0)
        .ok_or("PEXPIRETIME of the held lock")? as f64;
    // The waiter comes along at a random moment of the first 10 ms, so that
    // the polling waiter's phase is not tied to the lease.
    std::thread::sleep(Duration::from_micros(jitter_us(10_000)));
    let mut token_ms = None;
    let granted_at = match design {
        Design::Block => {
            let reply =
                waiter.call(&["DLOCK.ACQUIRE", key, "waiter", WAITER_TTL, "BLOCK", "2000"])?;
            let at = wall_ms();
            expect(
                "DLOCK.ACQUIRE BLOCK after the lease",
                &reply,
                reply.is_grant(),
            )?;
            token_ms = reply
                .as_array()
                .and_then(|grant| grant[0].as_int())
                .map(|token| token as f64 / 1000.0);
            expect_released(waiter.call(&["DLOCK.RELEASE", key, "waiter"])?)?;
            at
        }
        Design::PubSub => {
            let at = loop {
                while sub.wait_readable(None)? {
                    sub.read()?;
                }
                let reply =
                    waiter.call(&["EVALSHA", &scripts.lock, "1", key, WAITER_TTL, "waiter"])?;
                let at = wall_ms();
                match reply {
                    Reply::Nil => break at,
                    Reply::Int(pttl) => {
                        if pttl > 0
                            && sub.wait_readable(Some(Duration::from_millis(pttl as u64)))?
                        {
                            sub.read()?;
                        }
                    }
                    other => bail!("lock script: unexpected reply {other:?}"),
                }
                if at > deadline + 2000.0 {
                    bail!("pub/sub waiter: no lock 2 s after the lease ended");
                }
            };
            let released = waiter.call(&[
                "EVALSHA",
                &scripts.unlock,
                "2",
                key,
                &channel,
                "0",
                WAITER_TTL,
                "waiter",
            ])?;
            expect("unlock script", &released, released.as_int() == Some(1))?;
            at
        }
        Design::Poll10 => {
            let at = loop {
                let reply = waiter.call(&["SET", key, "waiter", "NX", "PX", WAITER_TTL])?;
                let at = wall_ms();
                if reply.is_ok() {
                    break at;
                }
                expect("SET NX PX", &reply, reply.is_nil())?;
                if at > deadline + 2000.0 {
                    bail!("polling waiter: no lock 2 s after the lease ended");
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let released =
                waiter.call(&["EVALSHA", &scripts.compare_and_delete, "1", key, "waiter"])?;
            expect(
                "compare-and-delete",
                &released,
                released.as_int() == Some(1),
            )?;
            at
        }
    };
    Ok(Delay {
        received: granted_at - deadline,
        granted: token_ms.map(|token| token - deadline),
    })
}

/// The host's part of a lease-expiry hand-off: how late a thread on the
/// server's core, asleep on a `timerfd` like the module's wake-up, wakes
/// for an instant a few ms ahead (in ms). The server is idle meanwhile.
fn timer_round(config: &Config) -> Res<f64> {
    let cpu = config.server_cpu;
    let late = std::thread::scope(|scope| {
        scope
            .spawn(move || -> Res<Duration> {
                if let Some(cpu) = cpu {
                    sys::pin_to_cpu(cpu)?;
                }
                let at = SystemTime::now() + Duration::from_micros(5_000 + jitter_us(1_000));
                Ok(sys::sleep_until_wall(at)?)
            })
            .join()
            .unwrap_or_else(|_| Err("the timer thread panicked".into()))
    })?;
    Ok(as_ms(late))
}

/// One release hand-off, the reference of issue 15's expiry target: the
/// holder takes the lock with a long lease, the waiter blocks behind it, and
/// the delay runs from the holder's DLOCK.RELEASE being sent to the waiter's
/// grant being received.
///
/// `Release::Prompt` releases as soon as the waiter is queued, the waiter's
/// grant read on the same thread: server and load generator are busy a
/// moment before. `Release::AfterIdle` holds the lock 30 to 40 ms first, as
/// long as an expiry round's waiter waits, with the waiter's thread blocked
/// on its read all that time: the server, the waiter and their cores wake
/// from the same idle as on a lease expiry, so only the hand-off itself
/// differs.
fn release_round(clients: &mut Clients, key: &str, release: Release) -> Res<f64> {
    let Clients { holder, waiter, .. } = clients;
    let grant = holder.call(&["DLOCK.ACQUIRE", key, "holder", WAITER_TTL])?;
    expect("DLOCK.ACQUIRE", &grant, grant.is_grant())?;
    // A long BLOCK: a stall of the machine must not time the waiter out.
    let acquire = ["DLOCK.ACQUIRE", key, "waiter", WAITER_TTL, "BLOCK", "30000"];
    let delay = match release {
        Release::Prompt => {
            waiter.queue(&acquire);
            waiter.flush()?;
            wait_for_waiting(holder, key, 1, Duration::from_secs(10))?;
            let start = Instant::now();
            send_release(holder, key)?;
            let granted = waiter.read()?;
            let delay = start.elapsed();
            expect("hand-off grant", &granted, granted.is_grant())?;
            expect_released(holder.read()?)?;
            delay
        }
        Release::AfterIdle => std::thread::scope(|scope| -> Res<Duration> {
            let waiting = scope.spawn(|| -> Res<Instant> {
                let granted = waiter.call(&acquire)?;
                let at = Instant::now();
                expect("hand-off grant", &granted, granted.is_grant())?;
                Ok(at)
            });
            wait_for_waiting(holder, key, 1, Duration::from_secs(10))?;
            std::thread::sleep(Duration::from_micros(30_000 + jitter_us(10_000)));
            let start = Instant::now();
            send_release(holder, key)?;
            expect_released(holder.read()?)?;
            let granted_at = waiting
                .join()
                .unwrap_or_else(|_| Err("the waiter thread panicked".into()))?;
            Ok(granted_at.saturating_duration_since(start))
        })?,
    };
    expect_released(waiter.call(&["DLOCK.RELEASE", key, "waiter"])?)?;
    Ok(as_ms(delay))
}

/// How a release round's holder releases (see [`release_round`]).
#[derive(Clone, Copy)]
enum Release {
    Prompt,
    AfterIdle,
}

fn send_release(holder: &mut Conn, key: &str) -> Res<()> {
    holder.queue(&["DLOCK.RELEASE", key, "holder"]);
    Ok(holder.flush()?)
}

fn expect_released(reply: Reply) -> Res<()> {
    expect("DLOCK.RELEASE", &reply, reply.as_int() == Some(0))
}

/// Moves the subscription from `old` (if any) to `new`, skipping any
/// message still buffered, until the server confirms the new one.
fn resubscribe(sub: &mut Conn, old: &str, new: &str) -> Res<()> {
    if !old.is_empty() {
        sub.queue(&["UNSUBSCRIBE", old]);
    }
    sub.queue(&["SUBSCRIBE", new]);
    sub.flush()?;
    loop {
        let reply = sub.read()?;
        if let Some([Reply::Bulk(kind), Reply::Bulk(channel), _]) = reply.as_array() {
            if kind == b"subscribe" && channel == new.as_bytes() {
                return Ok(());
            }
        }
    }
}

pub fn run(config: &Config) -> Res<Section> {
    let server = Server::start(config, &[])?;
    let mut ctl = server.conn()?;
    let scripts = Scripts::load(&mut ctl)?;
    flushall(&mut ctl)?;
    let mut clients = Clients {
        holder: server.conn()?,
        waiter: server.conn()?,
        sub: server.conn()?,
    };
    let rounds = config.pick(20, 200);
    let mut delays: Vec<Vec<f64>> = vec![Vec::new(); Design::ALL.len()];
    let mut subscribed = String::new();
    let mut releases: Vec<f64> = Vec::new();
    let mut grants: Vec<f64> = Vec::new();
    let mut idle_releases: Vec<f64> = Vec::new();
    let mut timers: Vec<f64> = Vec::new();
    // Each round: the three designs, the two release hand-offs and one bare
    // timer wake-up, rotating.
    let kinds = Design::ALL.len() + 3;
    let trace = std::env::var_os("DLOCK_BENCH_TRACE").is_some();
    for r in 0..rounds {
        for k in 0..kinds {
            let index = (r + k) % kinds;
            if index == Design::ALL.len() {
                let key = format!("release:{r}");
                releases.push(release_round(&mut clients, &key, Release::Prompt)?);
                continue;
            }
            if index == Design::ALL.len() + 1 {
                let key = format!("idle-release:{r}");
                idle_releases.push(release_round(&mut clients, &key, Release::AfterIdle)?);
                continue;
            }
            if index == Design::ALL.len() + 2 {
                timers.push(timer_round(config)?);
                continue;
            }
            let key = format!("lease:{r}:{index}");
            if Design::ALL[index] == Design::PubSub {
                // One subscription per key, as a waiter makes before its first retry.
                let channel = format!("unlock:{key}");
                resubscribe(&mut clients.sub, &subscribed, &channel)?;
                subscribed = channel;
            }
            let delay = round(Design::ALL[index], &mut clients, &scripts, &key)?;
            delays[index].push(delay.received);
            grants.extend(delay.granted);
            if trace && Design::ALL[index] == Design::Block {
                // Each round's two parts, to tell the server's lateness
                // (grant made) from the waiter's (grant received).
                let made = delay.granted.map_or(f64::NAN, |granted| granted - 1.0);
                eprintln!(
                    "expiry round {r}: lease end -> grant made {made:.3} ms, -> grant received {:.3} ms",
                    delay.received - 1.0
                );
            }
        }
    }
    let p = |d: usize, q: f64| percentile(&delays[d], q);

    let mut section = Section::new(5, "Lease-expiry hand-off delay");
    section.about = format!(
        "A holder takes the lock with a {LEASE_MS} ms lease and never releases it; \
         one waiter waits for it. The delay is the wall-clock time the waiter's \
         grant arrives minus the lease deadline (`PEXPIRETIME` of the key, read \
         right after the holder's acquire, in whole ms: the lease covers its \
         deadline ms, so the lock is free from the next one). dlock's waiter is \
         blocked (`DLOCK.ACQUIRE .. BLOCK`); the pub/sub waiter sleeps for the \
         PTTL the lock script returned and retries (nothing is published when a \
         lease runs out); the polling waiter retries SET NX every 10 ms. The \
         waiter starts at a random moment in the first 10 ms of the lease. \
         {rounds} rounds per design, interleaved with as many rounds of two release \
         hand-offs, the references of the expiry target (a holder with a long lease \
         releases while the waiter is blocked: promptly, or after holding the lock 30 to \
         40 ms, as long as an expiry round's waiter waits, with everything idle \
         meanwhile), and of a bare timer wake-up (a thread on the server's core sleeps \
         on a timerfd until an instant 5 to 6 ms ahead), the host's share of any \
         timer-driven hand-off."
    );
    let mut table = Table::new(
        "",
        &[
            "design",
            "p50 delay",
            "p99 delay",
            "max delay",
            "p99 from lease end",
            "p50 vs dlock",
            "p99 vs dlock",
        ],
    );
    for (d, design) in Design::ALL.iter().enumerate() {
        table.row(vec![
            design.name().to_string(),
            format!("{:.3} ms", p(d, 50.0)),
            format!("{:.3} ms", p(d, 99.0)),
            format!("{:.3} ms", p(d, 100.0)),
            format!("{:.3} ms", p(d, 99.0) - 1.0),
            times(ratio(p(d, 50.0), p(0, 50.0))),
            times(ratio(p(d, 99.0), p(0, 99.0))),
        ]);
    }
    section.tables.push(table);
    let release = |q: f64| percentile(&releases, q);
    let idle_release = |q: f64| percentile(&idle_releases, q);
    let mut handoffs = Table::new(
        "dlock's hand-offs in the same run: the lease-expiry delay above against a \
         release hand-off (release sent to the waiter's grant received), prompt and \
         after an idle wait as long as the expiry round's:",
        &[
            "hand-off",
            "p50",
            "p99",
            "max",
            "expiry - this, p50",
            "expiry - this, p99",
        ],
    );
    handoffs.row(vec![
        "lease expiry (lease deadline -> waiter's grant received)".into(),
        format!("{:.3} ms", p(0, 50.0)),
        format!("{:.3} ms", p(0, 99.0)),
        format!("{:.3} ms", p(0, 100.0)),
        String::new(),
        String::new(),
    ]);
    let rows: [(&str, &dyn Fn(f64) -> f64); 2] = [
        (
            "release after 30-40 ms idle (DLOCK.RELEASE sent -> waiter's grant received)",
            &idle_release,
        ),
        (
            "release as soon as the waiter is queued (same, busy a moment before)",
            &release,
        ),
    ];
    for (name, delay) in rows {
        handoffs.row(vec![
            name.into(),
            format!("{:.3} ms", delay(50.0)),
            format!("{:.3} ms", delay(99.0)),
            format!("{:.3} ms", delay(100.0)),
            format!("{:.3} ms", p(0, 50.0) - delay(50.0)),
            format!("{:.3} ms", p(0, 99.0) - delay(99.0)),
        ]);
    }
    section.tables.push(handoffs);
    let grant = |q: f64| percentile(&grants, q);
    let timer = |q: f64| percentile(&timers, q);
    let mut parts = Table::new(
        "Where dlock's expiry delay goes, in the same run (each row its own percentiles, \
         so they do not add up exactly):",
        &["part", "p50", "p99"],
    );
    parts.row(vec![
        "the lease's deadline millisecond (PEXPIRETIME -> lease end)".into(),
        "1.000 ms".into(),
        "1.000 ms".into(),
    ]);
    parts.row(vec![
        "the host: a thread on the server's core asleep on a timerfd, as the module's \
         wake-up is, wakes this late (no Redis involved)"
            .into(),
        format!("{:.3} ms", timer(50.0)),
        format!("{:.3} ms", timer(99.0)),
    ]);
    parts.row(vec![
        "lease end -> grant made in the server (its fencing token, µs of the server's clock)"
            .into(),
        format!("{:.3} ms", grant(50.0) - 1.0),
        format!("{:.3} ms", grant(99.0) - 1.0),
    ]);
    parts.row(vec![
        "lease end -> grant received by the waiter".into(),
        format!("{:.3} ms", p(0, 50.0) - 1.0),
        format!("{:.3} ms", p(0, 99.0) - 1.0),
    ]);
    section.tables.push(parts);
    section.notes.push(
        "A lease covers its whole deadline millisecond, exactly like a Redis key's expire \
         time, so the earliest possible hand-off is 1 ms after PEXPIRETIME; \"p99 from lease \
         end\" subtracts that millisecond. dlock hands the lock on from a module timer armed on \
         the microsecond clock for the instant the lease ends (or when Redis's own expiry \
         deletes the key); the target is checked on the raw figure."
            .into(),
    );
    section.notes.push(
        "Two release references: a lease-expiry round idles 30 to 40 ms before its hand-off \
         (the server asleep in epoll, the waiter's thread blocked on its read), and waking \
         from that idle costs this virtual machine's cores about 0.2 ms that a release sent \
         while everything is still busy does not pay. The release after an idle wait as long \
         as the expiry round's is the like-for-like reference of issue 15's target; the \
         prompt release, the reference as the issue first measured it, is kept beside it."
            .into(),
    );
    section.targets.push(Target {
        what: "lease-expiry hand-off delay, p99 (dlock BLOCK)".into(),
        measured: format!("{:.3} ms", p(0, 99.0)),
        goal: "<= 2 ms".into(),
        met: p(0, 99.0) <= 2.0,
    });
    section.targets.push(Target {
        what: "lease-expiry hand-off p99 <= p99 of a release hand-off after as long an idle \
               wait + 1 ms (issue 15)"
            .into(),
        measured: format!(
            "{:.3} ms vs {:.3} ms + 1 ms",
            p(0, 99.0),
            idle_release(99.0)
        ),
        goal: "<= release p99 + 1 ms".into(),
        met: p(0, 99.0) <= idle_release(99.0) + 1.0,
    });
    // Issue 27 restated the goal against the release after as long an idle
    // wait (above); the prompt release stays as context.
    section.targets.push(Target {
        what: "the same against a prompt release hand-off (issue 15, as first measured)".into(),
        measured: format!("{:.3} ms vs {:.3} ms + 1 ms", p(0, 99.0), release(99.0)),
        goal: crate::report::NO_GOAL.into(),
        met: true,
    });
    section.commands = vec![
        "target/release/dlock-bench --only 5   # one round, for each design:".into(),
        format!("#   dlock:    DLOCK.ACQUIRE k holder {LEASE_MS} ; PEXPIRETIME k ; (waiter) DLOCK.ACQUIRE k waiter {WAITER_TTL} BLOCK 2000 ; DLOCK.RELEASE k waiter"),
        format!("#   pub/sub:  EVALSHA <lock> 1 k {LEASE_MS} holder ; PEXPIRETIME k ; (waiter, SUBSCRIBEd to unlock:k) EVALSHA <lock> 1 k {WAITER_TTL} waiter -> PTTL, wait, retry"),
        format!("#   polling:  SET k holder NX PX {LEASE_MS} ; PEXPIRETIME k ; (waiter) SET k waiter NX PX {WAITER_TTL} every 10 ms"),
        format!("#   release:  DLOCK.ACQUIRE k holder {WAITER_TTL} ; (waiter) DLOCK.ACQUIRE k waiter {WAITER_TTL} BLOCK 30000 ; DLOCK.INFO k (until waiting is 1) ; DLOCK.RELEASE k holder (clock starts) ; (waiter) read the grant (clock stops) ; DLOCK.RELEASE k waiter"),
        format!("#   release after idle: the same, with a sleep of 30-40 ms before DLOCK.RELEASE, the waiter reading its grant on its own thread"),
    ];
    Ok(section)
}
