//! Scenario 12 (issue 12): count-down latch wake-up. A latch of 1,000 with
//! 64 awaiters (each its own connection, all read by one thread through one
//! epoll set); 999 count-downs whose replies are all read, then the last
//! one; the figure is the time from the last count-down being sent to the
//! last awaiter's answer being read, against RedissonCountDownLatch's
//! algorithm (a plain counter, a Lua count-down that deletes it and
//! publishes at zero, awaiters subscribed to the channel that re-read the
//! counter when a message comes). The report also splits the time into
//! its parts, which show the floor of any design on the machine.

use std::time::{Duration, Instant};

use super::{dlock_info_int, expect, flushall, has_command, skipped};
use crate::report::{Section, Table, Target};
use crate::resp::Conn;
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{as_ms, median, percentile, ratio, times};
use crate::sys::Poller;
use crate::{bail, Config, Res};

const COUNT: usize = 1000;
const AWAITERS: usize = 64;
/// The latch's ttl and the awaiters' timeout: far longer than a round.
const TTL: &str = "60000";
const AWAIT_MS: &str = "30000";
/// How long the reader spins on its epoll set (waits of zero) after the
/// last count-down before it sleeps in epoll_wait: far longer than a round
/// normally takes, short enough not to hog the load core when the server
/// is descheduled.
const SPIN: Duration = Duration::from_millis(50);
/// PINGs timed on the control connection in each round.
const PINGS: usize = 5;
const TARGET: &str = "latch: last awaiter's reply after the last count-down, dlock / RCountDownLatch's algorithm (goal of issue 27)";
/// Issue 27's goal for TARGET: the fan-out both designs share is the floor
/// (see the note the report prints), so the saving is Redisson's GET phase.
const GOAL: f64 = 0.7;
const TITLE: &str = "Count-down latch: 64 awaiters woken by the last count-down";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Design {
    Dlock,
    Redisson,
}

/// The figures of one round, in ms from the moment the last count-down was
/// sent.
#[derive(Clone, Copy, Debug)]
struct Timing {
    /// The first awaiter's answer read.
    first: f64,
    /// The last awaiter's answer read: the scenario's figure.
    last: f64,
    /// Redisson only: the first and the last pub/sub message read (the
    /// fan-out alone, before the awaiters' GETs).
    first_message: Option<f64>,
    fanout: Option<f64>,
    /// One PING round trip on the control connection just before the last
    /// count-down (median of a few): the floor of any design.
    ping: f64,
    /// Requests the server received from the last count-down on: that
    /// count-down and every GET an awaiter sent after its message.
    requests: usize,
}

/// The zero-count message of RedissonCountDownLatch (CountDownLatchPubSub).
const ZERO_COUNT_MESSAGE: &str = "0";
/// Its new-count message (published by trySetCount).
const NEW_COUNT_MESSAGE: &str = "1";
/// Poller tokens: subscriber `i` is `i`, awaiter connection `i` is
/// `AWAITERS + i`.
const CONN_TOKEN: u64 = AWAITERS as u64;

/// One round of one design.
///
/// Every awaiter's socket is read by this one thread through one epoll
/// set, in the order their data arrives (64 threads taking turns on the
/// load core would measure the scheduler), spinning on it so that no
/// answer pays for a wake-up: a dlock awaiter has its answer
/// when its AWAIT reply is read; a Redisson awaiter, when its message is
/// read, sends its GET at once (as 64 independent clients would) and has
/// its answer when the GET reply says the counter is gone. The clock starts
/// when the last count-down is written to the socket, after the replies of
/// the 999 before it have all been read (the server is idle), and stops at
/// each answer read.
fn round(server: &Server, scripts: &Scripts, design: Design, key: &str) -> Res<Timing> {
    let mut ctl = server.conn()?;
    let channel = format!("redisson_countdownlatch__channel__{{{key}}}");
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
            let count = COUNT.to_string();
            let created = ctl.call(&[
                "EVALSHA",
                &scripts.latch_try_set,
                "2",
                key,
                &channel,
                NEW_COUNT_MESSAGE,
                &count,
            ])?;
            expect("trySetCount", &created, created.as_int() == Some(1))?;
            for _ in 0..AWAITERS {
                // await(): the count, then subscribe, then the count again
                // (a message published in between is buffered, not lost).
                let mut conn = server.conn()?;
                let before = conn.call(&["GET", key])?;
                expect(
                    "GET count",
                    &before,
                    before.as_text() == Some(count.clone()),
                )?;
                let mut sub = server.conn()?;
                let reply = sub.call(&["SUBSCRIBE", &channel])?;
                expect(
                    "SUBSCRIBE",
                    &reply,
                    reply.as_array().is_some_and(|a| a.len() == 3),
                )?;
                let after = conn.call(&["GET", key])?;
                expect("GET count", &after, after.as_text() == Some(count.clone()))?;
                subs.push(sub);
                conns.push(conn);
            }
        }
    }
    // All but the last count-down, pipelined, and every reply read: the
    // server has nothing left to do when the clock starts.
    for _ in 0..COUNT - 1 {
        queue_count_down(&mut ctl, scripts, design, key, &channel);
    }
    ctl.flush()?;
    for i in 0..COUNT - 1 {
        let reply = ctl.read()?;
        let left = (COUNT - 1 - i) as i64;
        let fine = match design {
            Design::Dlock => reply.as_int() == Some(left),
            Design::Redisson => reply.is_nil(),
        };
        expect("count-down", &reply, fine)?;
    }
    if design == Design::Redisson {
        // Redisson's count-down replies nothing: the counter says that it
        // did not reach zero early (no message is waiting yet).
        let left = ctl.call(&["GET", key])?;
        expect("GET count", &left, left.as_text().as_deref() == Some("1"))?;
    }
    let mut pings = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let sent = Instant::now();
        let pong = ctl.call(&["PING"])?;
        pings.push(as_ms(sent.elapsed()));
        expect(
            "PING",
            &pong,
            pong.is_ok() || pong.as_text().as_deref() == Some("PONG"),
        )?;
    }
    let mut poller = Poller::new(2 * AWAITERS)?;
    for (i, sub) in subs.iter().enumerate() {
        poller.add(sub.raw_fd(), i as u64)?;
    }
    for (i, conn) in conns.iter().enumerate() {
        poller.add(conn.raw_fd(), CONN_TOKEN + i as u64)?;
    }
    if subs.iter().chain(conns.iter()).any(Conn::has_buffered) {
        bail!("latch awaiter: input before the last count-down");
    }
    queue_count_down(&mut ctl, scripts, design, key, &channel);
    let start = Instant::now();
    ctl.flush()?;

    let deadline = start + Duration::from_secs(30);
    let spin_until = start + SPIN;
    let mut answered = vec![None; AWAITERS];
    let mut messaged = vec![None; subs.len()];
    let mut left = AWAITERS;
    let mut ready = Vec::with_capacity(2 * AWAITERS);
    while left > 0 {
        let now = Instant::now();
        if now >= deadline {
            bail!("latch: {left} awaiters without an answer 30 s after the last count-down");
        }
        ready.clear();
        // Spinning (a zero timeout) keeps this thread awake, so that no
        // answer pays for waking it; past SPIN it sleeps in epoll_wait.
        let patience = if now < spin_until {
            Duration::ZERO
        } else {
            deadline - now
        };
        poller.wait(patience, &mut ready)?;
        for &token in &ready {
            if token < CONN_TOKEN {
                let i = token as usize;
                let message = subs[i].read()?;
                let at = Instant::now();
                let zero = message.as_array().is_some_and(|parts| {
                    parts.len() == 3 && parts[2].as_text().as_deref() == Some(ZERO_COUNT_MESSAGE)
                });
                expect("pub/sub message", &message, zero && messaged[i].is_none())?;
                messaged[i] = Some(at);
                // The awaiter's loop: the message opens its local latch and
                // it reads the count again.
                conns[i].queue(&["GET", key]);
                conns[i].flush()?;
            } else {
                let i = (token - CONN_TOKEN) as usize;
                let reply = conns[i].read()?;
                let at = Instant::now();
                let open = match design {
                    Design::Dlock => reply.as_int() == Some(1),
                    Design::Redisson => reply.is_nil(),
                };
                expect("awaiter's answer", &reply, open && answered[i].is_none())?;
                answered[i] = Some(at);
                left -= 1;
            }
        }
    }
    let reply = ctl.read()?;
    let fine = match design {
        Design::Dlock => reply.as_int() == Some(0),
        Design::Redisson => reply.is_nil(),
    };
    expect("last count-down", &reply, fine)?;
    let since = |at: Instant| as_ms(at.saturating_duration_since(start));
    let answers: Vec<f64> = answered.iter().flatten().map(|&at| since(at)).collect();
    let messages: Vec<f64> = messaged.iter().flatten().map(|&at| since(at)).collect();
    Ok(Timing {
        first: percentile(&answers, 0.0),
        last: percentile(&answers, 100.0),
        first_message: (!messages.is_empty()).then(|| percentile(&messages, 0.0)),
        fanout: (!messages.is_empty()).then(|| percentile(&messages, 100.0)),
        ping: median(&pings),
        requests: 1 + messages.len(),
    })
}

fn queue_count_down(conn: &mut Conn, scripts: &Scripts, design: Design, key: &str, channel: &str) {
    match design {
        Design::Dlock => conn.queue(&["DLOCK.COUNTDOWN", key]),
        Design::Redisson => conn.queue(&[
            "EVALSHA",
            &scripts.latch_count_down,
            "2",
            key,
            channel,
            ZERO_COUNT_MESSAGE,
        ]),
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
            &[(TARGET, "<= 0.70x")],
        ));
    }
    let scripts = Scripts::load(&mut conn)?;
    let rounds = config.pick(3, 20);
    let designs = [Design::Dlock, Design::Redisson];
    let mut timings: Vec<Vec<Timing>> = vec![Vec::new(); 2];
    for r in 0..rounds {
        for k in 0..designs.len() {
            let d = (r + k) % designs.len();
            flushall(&mut conn)?;
            let key = format!("latch:{r}");
            timings[d].push(round(&server, &scripts, designs[d], &key)?);
            if designs[d] == Design::Dlock {
                // An opened latch is gone.
                if dlock_info_int(&mut conn, &key, "count")?.is_some() {
                    bail!("the latch {key} still exists after it opened");
                }
            }
        }
    }
    let firsts = |d: usize| timings[d].iter().map(|t| t.first).collect::<Vec<_>>();
    let lasts = |d: usize| timings[d].iter().map(|t| t.last).collect::<Vec<_>>();
    let dlock_last = median(&lasts(0));
    let redisson_last = median(&lasts(1));
    let pings: Vec<f64> = timings.iter().flatten().map(|t| t.ping).collect();
    let ping = median(&pings);
    let fanouts: Vec<f64> = timings[1].iter().filter_map(|t| t.fanout).collect();
    let fanout = median(&fanouts);
    let get_phases: Vec<f64> = timings[1]
        .iter()
        .filter_map(|t| t.fanout.map(|f| t.last - f))
        .collect();
    let get_phase = median(&get_phases);
    let first_messages: Vec<f64> = timings[1].iter().filter_map(|t| t.first_message).collect();
    let first_message = median(&first_messages);
    let per_awaiter_us = (fanout - first_message).max(0.0) * 1000.0 / (AWAITERS - 1) as f64;
    let floor = ratio(fanout, redisson_last);
    let dlock_first = median(&firsts(0));

    let mut section = Section::new(12, TITLE);
    section.about = format!(
        "A latch of {COUNT} and {AWAITERS} awaiters, each its own connection(s). The \
         control connection sends {} count-downs pipelined and reads all their replies \
         (the server is then idle), then the last one. The figure is the time from the \
         last count-down being written to the socket to the last awaiter's answer being \
         read. Every awaiter socket of both designs is read by the same machinery: one \
         thread of the bench spinning on one epoll set, each socket read as soon as its \
         data arrives (64 threads taking turns on the load core would measure the \
         scheduler, and a reader sleeping between answers would add a wake-up to each). \
         dlock: `DLOCK.LATCH k {COUNT} {TTL}`, awaiters `DLOCK.AWAIT k {AWAIT_MS}` \
         (blocked; the answer is its reply, 1), `DLOCK.COUNTDOWN k`. Redisson: \
         RedissonCountDownLatch's algorithm in this bench's own Lua: trySetCount (a \
         script: `SET` the counter if it does not exist, publish the new-count message); \
         each awaiter, as `await()` does, reads the counter (`GET`), subscribes to \
         `redisson_countdownlatch__channel__{{k}}` and reads the counter again; countDown \
         is a script that `DECR`s, deletes the counter at zero and publishes the \
         zero-count message; an awaiter, when its message is read, sends `GET` at once \
         and has its answer when the reply is null (count 0). {rounds} rounds per design, \
         interleaved.",
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
            times(ratio(median(&lasts(d)), redisson_last)),
        ]);
    }
    section.tables.push(table);
    let mut parts = Table::new(
        "Where the time goes (p50 over the rounds, ms after the last count-down is sent)",
        &["part", "p50"],
    );
    parts.row(vec![
        "one round trip on the idle control connection (PING): the floor of any design".into(),
        format!("{ping:.3} ms"),
    ]);
    parts.row(vec![
        "Redisson: first pub/sub message read".into(),
        format!("{first_message:.3} ms"),
    ]);
    parts.row(vec![
        format!(
            "Redisson: last pub/sub message read (one command, {AWAITERS} messages written \
             by the server, {AWAITERS} sockets read by the bench)"
        ),
        format!("{fanout:.3} ms"),
    ]);
    parts.row(vec![
        format!("Redisson: then its {AWAITERS} GETs, until the last reply is read"),
        format!("{get_phase:.3} ms"),
    ]);
    parts.row(vec![
        "dlock: first awaiter's reply read".into(),
        format!("{dlock_first:.3} ms"),
    ]);
    parts.row(vec![
        format!("dlock: last awaiter's reply read (the same {AWAITERS} writes and reads)"),
        format!("{dlock_last:.3} ms"),
    ]);
    section.tables.push(parts);
    let mut requests = Table::new(
        "Server requests per opening (from the last count-down to every awaiter's answer)",
        &["design", "requests", "what they are"],
    );
    let most_requests = |d: usize| {
        timings[d]
            .iter()
            .map(|t| t.requests)
            .max()
            .unwrap_or(0)
            .to_string()
    };
    requests.row(vec![
        "dlock".into(),
        most_requests(0),
        "the last `DLOCK.COUNTDOWN` (the awaiters were answered by the server)".into(),
    ]);
    requests.row(vec![
        "RCountDownLatch's algorithm".into(),
        most_requests(1),
        format!("the count-down script, then one `GET` per awaiter ({AWAITERS})"),
    ]);
    section.tables.push(requests);
    section.targets.push(Target::at_most(
        TARGET,
        ratio(dlock_last, redisson_last),
        GOAL,
    ));
    section.notes.push(format!(
        "The floor on this machine. Waking {AWAITERS} awaiters on {AWAITERS} connections \
         is, for any design, one command, then {AWAITERS} replies written by the server \
         and {AWAITERS} sockets read: Redisson's first phase, {fanout:.3} ms here (the \
         first message after {first_message:.3} ms, then about {per_awaiter_us:.1} us per \
         awaiter for one loopback write and one read). dlock answers its awaiters in that \
         same step and cannot go below it ({dlock_last:.3} ms; its first reply comes \
         {:.3} ms after Redisson's first message: between reading the count-down and its \
         first write the server hands each of the {AWAITERS} awaiters its answer and \
         Redis's module blocked-client path runs a reply callback, copies the reply and \
         unblocks each client, where PUBLISH only appends a message to each subscriber's \
         buffer). What a server-side latch saves is Redisson's second phase only, its \
         {AWAITERS} GETs ({get_phase:.3} ms, {} the first phase): as many requests read \
         and replies written and read again. The least ratio this scenario can show is \
         therefore about {fanout:.3} / {redisson_last:.3} = {}: the goal of 0.10x would \
         need Redisson's GETs to cost nine times its fan-out, which is why issue 27 set the goal at 0.70x.",
        dlock_first - first_message,
        times(ratio(get_phase, fanout)),
        times(floor)
    ));
    section.commands = vec![
        "target/release/dlock-bench --only 12   # one round, for each design:".into(),
        format!("#   dlock:    DLOCK.LATCH k {COUNT} {TTL} ; (64 awaiters) DLOCK.AWAIT k {AWAIT_MS} ; DLOCK.INFO k (until waiting is 64) ; DLOCK.COUNTDOWN k x {COUNT}"),
        format!("#   Redisson: EVALSHA <trySetCount> 2 k redisson_countdownlatch__channel__{{k}} {NEW_COUNT_MESSAGE} {COUNT} ; (64 awaiters) GET k ; SUBSCRIBE redisson_countdownlatch__channel__{{k}} ; GET k ; on a message GET k ; EVALSHA <countDown> 2 k redisson_countdownlatch__channel__{{k}} {ZERO_COUNT_MESSAGE} x {COUNT}"),
    ];
    Ok(section)
}
