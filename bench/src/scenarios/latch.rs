//! Scenario 12 (issue 12): count-down latch wake-up. A latch of 1,000 with
//! 64 awaiters (one thread and connection each); 999 count-downs, then the
//! last one; the figure is the time from the last count-down being sent to
//! the last awaiter's reply, against RCountDownLatch's algorithm (a plain
//! counter, a Lua count-down that publishes at zero, awaiters subscribed to
//! the channel that re-read the counter when a message comes).

use std::time::{Duration, Instant};

use super::{dlock_info_int, expect, flushall, has_command, skipped};
use crate::report::{Section, Table, Target};
use crate::resp::Conn;
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{as_ms, median, percentile, ratio, times};
use crate::{bail, Config, Res};

const COUNT: usize = 1000;
const AWAITERS: usize = 64;
/// The latch's ttl and the awaiters' timeout: far longer than a round.
const TTL: &str = "60000";
const AWAIT_MS: &str = "30000";
const TARGET: &str = "latch: last awaiter's reply after the last count-down, dlock / RCountDownLatch's algorithm (issue 12)";
const TITLE: &str = "Count-down latch: 64 awaiters woken by the last count-down";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Design {
    Dlock,
    Redisson,
}

/// One round: (last count-down sent -> first awaiter's answer, -> last one), ms.
///
/// The awaiters are driven by this one thread, socket by socket, so that
/// what is measured is the server and the network, not 64 threads taking
/// turns on the load core: a dlock awaiter's answer is its AWAIT reply; a
/// Redisson awaiter, on its message, sends its GET at once (all GETs go out
/// before any reply is read, as 64 independent clients would) and has its
/// answer when the GET reply says the counter is gone.
fn round(server: &Server, scripts: &Scripts, design: Design, key: &str) -> Res<(f64, f64)> {
    let mut ctl = server.conn()?;
    let channel = format!("redisson_countdownlatch:{key}");
    let mut conns = Vec::with_capacity(AWAITERS);
    let mut subs = Vec::with_capacity(AWAITERS);
    match design {
        Design::Dlock => {
            let created = ctl.call(&["DLOCK.LATCH", key, &COUNT.to_string(), TTL])?;
            expect("DLOCK.LATCH", &created, created.as_int() == Some(1))?;
            for _ in 0..AWAITERS {
                let mut conn = server.conn()?;
                conn.queue(&["DLOCK.AWAIT", key, AWAIT_MS]);
                conn.flush()?;
                conns.push(conn);
            }
            super::wait_for_waiting(&mut ctl, key, AWAITERS as i64, Duration::from_secs(10))?;
        }
        Design::Redisson => {
            // trySetCount
            let created = ctl.call(&["SET", key, &COUNT.to_string(), "NX"])?;
            expect("SET count", &created, created.is_ok())?;
            for _ in 0..AWAITERS {
                let mut sub = server.conn()?;
                let reply = sub.call(&["SUBSCRIBE", &channel])?;
                expect(
                    "SUBSCRIBE",
                    &reply,
                    reply.as_array().is_some_and(|a| a.len() == 3),
                )?;
                // Subscribed first, then the count: a message published in
                // between is buffered, not lost.
                let mut conn = server.conn()?;
                let count = conn.call(&["GET", key])?;
                expect("GET count", &count, count.as_text().is_some())?;
                subs.push(sub);
                conns.push(conn);
            }
        }
    }
    // All but the last count-down, pipelined.
    for _ in 0..COUNT - 1 {
        queue_count_down(&mut ctl, scripts, design, key, &channel);
    }
    ctl.flush()?;
    for i in 0..COUNT - 1 {
        let reply = ctl.read()?;
        let left = (COUNT - 1 - i) as i64;
        expect("count-down", &reply, reply.as_int() == Some(left))?;
    }
    let start = Instant::now();
    queue_count_down(&mut ctl, scripts, design, key, &channel);
    ctl.flush()?;
    let patience = Some(Duration::from_secs(30));
    for (i, sub) in subs.iter_mut().enumerate() {
        if !sub.wait_readable(patience)? {
            bail!("Redisson latch awaiter: no message in 30 s");
        }
        let message = sub.read()?;
        expect(
            "pub/sub message",
            &message,
            message.as_array().is_some_and(|a| a.len() == 3),
        )?;
        let conn = &mut conns[i];
        conn.queue(&["GET", key]);
        conn.flush()?;
    }
    let mut woken = Vec::with_capacity(AWAITERS);
    for conn in conns.iter_mut() {
        if !conn.wait_readable(patience)? {
            bail!("latch awaiter: no answer in 30 s");
        }
        let reply = conn.read()?;
        woken.push(Instant::now());
        let open = match design {
            Design::Dlock => reply.as_int() == Some(1),
            Design::Redisson => reply.is_nil(),
        };
        expect("awaiter's answer", &reply, open)?;
    }
    let reply = ctl.read()?;
    expect("last count-down", &reply, reply.as_int() == Some(0))?;
    let first = woken.iter().min().copied().unwrap_or(start);
    let last = woken.iter().max().copied().unwrap_or(start);
    let since = |at: Instant| as_ms(at.saturating_duration_since(start));
    Ok((since(first), since(last)))
}

fn queue_count_down(conn: &mut Conn, scripts: &Scripts, design: Design, key: &str, channel: &str) {
    match design {
        Design::Dlock => conn.queue(&["DLOCK.COUNTDOWN", key]),
        Design::Redisson => {
            conn.queue(&["EVALSHA", &scripts.latch_count_down, "2", key, channel, "0"])
        }
    }
}

pub fn run(config: &Config) -> Res<Section> {
    let server = Server::start(config, &[])?;
    let mut conn = server.conn()?;
    let available = has_command(&mut conn, "dlock.latch")?
        && has_command(&mut conn, "dlock.countdown")?
        && has_command(&mut conn, "dlock.await")?;
    if !available {
        return Ok(skipped(
            12,
            TITLE,
            "this server has no DLOCK.LATCH / DLOCK.COUNTDOWN / DLOCK.AWAIT yet (issue 12)",
            &[(TARGET, "<= 0.10x")],
        ));
    }
    let scripts = Scripts::load(&mut conn)?;
    let rounds = config.pick(3, 20);
    let designs = [Design::Dlock, Design::Redisson];
    // delays[design] = (first, last) per round
    let mut delays: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 2];
    for r in 0..rounds {
        for k in 0..designs.len() {
            let d = (r + k) % designs.len();
            flushall(&mut conn)?;
            let key = format!("latch:{r}");
            delays[d].push(round(&server, &scripts, designs[d], &key)?);
            if designs[d] == Design::Dlock {
                // An opened latch is gone.
                if dlock_info_int(&mut conn, &key, "count")?.is_some() {
                    bail!("the latch {key} still exists after it opened");
                }
            }
        }
    }
    let firsts = |d: usize| delays[d].iter().map(|x| x.0).collect::<Vec<_>>();
    let lasts = |d: usize| delays[d].iter().map(|x| x.1).collect::<Vec<_>>();
    let mut section = Section::new(12, TITLE);
    section.about = format!(
        "A latch of {COUNT} and {AWAITERS} awaiters, each its own connection(s), all \
         driven by one thread of the bench (socket by socket, so that 64 threads \
         taking turns on the load core do not hide the server's part). \
         The control connection sends {} count-downs pipelined, then the last one; the \
         figure is the time from the last count-down being sent to the last awaiter \
         having its answer. dlock: `DLOCK.LATCH k {COUNT} {TTL}`, awaiters `DLOCK.AWAIT \
         k {AWAIT_MS}` (blocked, answered 1), `DLOCK.COUNTDOWN k`. Redisson: \
         RCountDownLatch's algorithm in this bench's own Lua (a counter set with \
         `SET NX`; a count-down script that deletes the counter and publishes when it \
         reaches zero; each awaiter subscribes, reads the counter, and re-reads it \
         when a message comes). {rounds} rounds per design, interleaved.",
        COUNT - 1
    );
    let mut table = Table::new(
        "",
        &[
            "design",
            "first awaiter, p50",
            "last awaiter, p50",
            "last awaiter, max",
            "last awaiter vs Redisson (p50)",
        ],
    );
    for (d, name) in [
        "dlock: DLOCK.AWAIT (blocked)",
        "RCountDownLatch's algorithm (Lua, pub/sub, GET)",
    ]
    .iter()
    .enumerate()
    {
        table.row(vec![
            name.to_string(),
            format!("{:.3} ms", median(&firsts(d))),
            format!("{:.3} ms", median(&lasts(d))),
            format!("{:.3} ms", percentile(&lasts(d), 100.0)),
            times(ratio(median(&lasts(d)), median(&lasts(1)))),
        ]);
    }
    section.tables.push(table);
    section.targets.push(Target::at_most(
        TARGET,
        ratio(median(&lasts(0)), median(&lasts(1))),
        0.1,
    ));
    section.commands = vec![
        "target/release/dlock-bench --only 12   # one round, for each design:".into(),
        format!("#   dlock:    DLOCK.LATCH k {COUNT} {TTL} ; (64 awaiters) DLOCK.AWAIT k {AWAIT_MS} ; DLOCK.INFO k (until waiting is 64) ; DLOCK.COUNTDOWN k x {COUNT}"),
        format!("#   Redisson: SET k {COUNT} NX ; (64 awaiters) SUBSCRIBE redisson_countdownlatch:k ; GET k ; on a message GET k ; EVALSHA <count-down> 2 k redisson_countdownlatch:k 0 x {COUNT}"),
    ];
    Ok(section)
}
