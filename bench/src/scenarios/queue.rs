//! Scenario 4: queue-length scaling. The server-side cost of a release that
//! hands the lock on, with 1, 100 and 10,000 entries queued behind the
//! holder, the queue length kept constant (one entry added at the tail
//! before each release):
//!
//! * blocked waiters: raw connections that sent `DLOCK.ACQUIRE .. BLOCK 0`
//!   and are not read until granted; cost = usec_per_call of DLOCK.RELEASE;
//! * DLOCK.FAIR reservations: cost = DLOCK.RELEASE + the head owner's
//!   DLOCK.ACQUIRE;
//! * the client-side Lua fair lock (RedissonFairLock): cost = its unlock
//!   script + the head's lock script (EVALSHA; tail adds use EVAL so that
//!   they are counted apart).
//!
//! Costs come from `CONFIG RESETSTAT` + `INFO commandstats`. The three
//! lengths of a kind live side by side and are measured in interleaved
//! blocks of rounds; each figure is the median of the blocks.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{commandstats, dlock_info_int, expect, flushall, info, wait_for_waiting};
use crate::report::{Section, Table, Target};
use crate::resp::{Conn, Reply};
use crate::scripts::{Scripts, FAIR_LOCK};
use crate::server::Server;
use crate::stats::{median, ratio, thousands, times, us};
use crate::{bail, Config, Res};

/// The queue lengths: 1, 100 and 10,000 (less when the open-file limit
/// cannot hold 10,000 blocked connections; the report says so).
fn lengths() -> [usize; 3] {
    let files = crate::sys::raise_nofile(20_000) as usize;
    [1, 100, 10_000.min(files.saturating_sub(1_000)).max(100)]
}
/// Lease of every hold and of every reservation: nothing runs out during a run.
const LONG_MS: &str = "3600000";
/// RedissonFairLock's threadWaitTime (its default).
const WAIT_MS: &str = "5000";
const PATIENCE: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Blocked,
    Reservations,
    LuaFair,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Blocked => "dlock, blocked waiters: DLOCK.RELEASE with hand-off",
            Kind::Reservations => "dlock, FAIR reservations: DLOCK.RELEASE + head's DLOCK.ACQUIRE",
            Kind::LuaFair => "Lua fair lock (Redisson style): unlock + head's lock script",
        }
    }
}

fn now_ms() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
        .to_string()
}

/// One queue of a given length and kind, kept at that length.
struct Queue<'a> {
    kind: Kind,
    length: usize,
    key: String,
    holder: String,
    /// Next owner number to add at the tail.
    next: usize,
    /// Next owner number at the head (reservations, Lua).
    head: usize,
    /// Blocked waiters' connections and owners, in queue order.
    waiters: VecDeque<(String, Conn)>,
    server: &'a Server,
    scripts: &'a Scripts,
}

impl<'a> Queue<'a> {
    fn lua_keys(&self) -> [String; 4] {
        [
            self.key.clone(),
            format!("{}:queue", self.key),
            format!("{}:timeouts", self.key),
            format!("{}:channel", self.key),
        ]
    }

    fn setup(
        kind: Kind,
        length: usize,
        server: &'a Server,
        scripts: &'a Scripts,
        ctl: &mut Conn,
    ) -> Res<Queue<'a>> {
        let key = match kind {
            Kind::Blocked => format!("queue:blocked:{length}"),
            Kind::Reservations => format!("queue:fair:{length}"),
            Kind::LuaFair => format!("queue:lua:{length}"),
        };
        let mut queue = Queue {
            kind,
            length,
            key,
            holder: "holder".into(),
            next: 0,
            head: 0,
            waiters: VecDeque::new(),
            server,
            scripts,
        };
        match kind {
            Kind::Blocked => {
                let grant = ctl.call(&["DLOCK.ACQUIRE", &queue.key, "holder", LONG_MS])?;
                expect("DLOCK.ACQUIRE", &grant, grant.is_grant())?;
                // One at a time, each confirmed, so that the queue order is known.
                for _ in 0..length {
                    queue.add_blocked(ctl)?;
                }
                wait_for_waiting(ctl, &queue.key, length as i64, PATIENCE)?;
            }
            Kind::Reservations => {
                let grant = ctl.call(&["DLOCK.ACQUIRE", &queue.key, "holder", LONG_MS])?;
                expect("DLOCK.ACQUIRE", &grant, grant.is_grant())?;
                for chunk in (0..length).collect::<Vec<_>>().chunks(1000) {
                    for _ in chunk {
                        let owner = queue.take_name();
                        ctl.queue(&["DLOCK.FAIR", &queue.key, &owner, LONG_MS]);
                    }
                    ctl.flush()?;
                    for reply in ctl.read_n(chunk.len())? {
                        expect("DLOCK.FAIR (reserve)", &reply, reply.is_nil())?;
                    }
                }
                wait_for_waiting(ctl, &queue.key, length as i64, PATIENCE)?;
            }
            Kind::LuaFair => {
                let [lock, list, timeouts, _] = queue.lua_keys();
                let reply = ctl.call(&[
                    "EVALSHA",
                    &scripts.fair_lock,
                    "3",
                    &lock,
                    &list,
                    &timeouts,
                    LONG_MS,
                    "holder",
                    WAIT_MS,
                    &now_ms(),
                ])?;
                expect("fair lock script (holder)", &reply, reply.is_nil())?;
                for chunk in (0..length).collect::<Vec<_>>().chunks(1000) {
                    let now = now_ms();
                    for _ in chunk {
                        let owner = queue.take_name();
                        ctl.queue(&[
                            "EVALSHA",
                            &scripts.fair_lock,
                            "3",
                            &lock,
                            &list,
                            &timeouts,
                            LONG_MS,
                            &owner,
                            WAIT_MS,
                            &now,
                        ]);
                    }
                    ctl.flush()?;
                    for reply in ctl.read_n(chunk.len())? {
                        expect("fair lock script (queue)", &reply, reply.as_int().is_some())?;
                    }
                }
                let queued = ctl.call(&["LLEN", &list])?;
                expect(
                    "LLEN of the Lua queue",
                    &queued,
                    queued.as_int() == Some(length as i64),
                )?;
            }
        }
        Ok(queue)
    }

    fn take_name(&mut self) -> String {
        let owner = format!("w{}", self.next);
        self.next += 1;
        owner
    }

    /// A new blocked waiter at the tail: a connection that sends the
    /// blocking acquire and is not read; returns once the server has blocked
    /// it (INFO clients, `blocked_clients`, which costs O(1) where
    /// DLOCK.INFO would list the whole queue).
    fn add_blocked(&mut self, ctl: &mut Conn) -> Res<()> {
        let before = blocked_clients(ctl)?;
        let owner = self.take_name();
        let mut conn = self.server.conn()?;
        conn.queue(&["DLOCK.ACQUIRE", &self.key, &owner, LONG_MS, "BLOCK", "0"]);
        conn.flush()?;
        let deadline = std::time::Instant::now() + PATIENCE;
        while blocked_clients(ctl)? <= before {
            if std::time::Instant::now() > deadline {
                bail!("{owner} was not blocked on {} in time", self.key);
            }
        }
        self.waiters.push_back((owner, conn));
        Ok(())
    }

    /// One measured round: an entry joins the tail, the holder releases and
    /// the head becomes the holder.
    fn round(&mut self, ctl: &mut Conn) -> Res<()> {
        match self.kind {
            Kind::Blocked => {
                self.add_blocked(ctl)?;
                let released = ctl.call(&["DLOCK.RELEASE", &self.key, &self.holder])?;
                expect("DLOCK.RELEASE", &released, released.as_int() == Some(0))?;
                // FIFO: the waiter that queued first must be the one granted.
                let (owner, mut head) = self.waiters.pop_front().ok_or("no waiter left")?;
                if !head.wait_readable(Some(Duration::from_secs(10)))? {
                    bail!(
                        "{}: the head waiter {owner} got no grant after the release",
                        self.key
                    );
                }
                let grant = head.read()?;
                let fine = matches!(grant.as_array(), Some([Reply::Int(_), Reply::Int(1), Reply::Bulk(o)]) if *o == owner.as_bytes());
                expect("the head waiter's grant", &grant, fine)?;
                head.close();
                self.holder = owner;
            }
            Kind::Reservations => {
                let tail = self.take_name();
                let head = format!("w{}", self.head);
                self.head += 1;
                ctl.queue(&["DLOCK.FAIR", &self.key, &tail, LONG_MS]);
                ctl.queue(&["DLOCK.RELEASE", &self.key, &self.holder]);
                ctl.queue(&["DLOCK.ACQUIRE", &self.key, &head, LONG_MS]);
                ctl.flush()?;
                let replies = ctl.read_n(3)?;
                expect("DLOCK.FAIR (tail)", &replies[0], replies[0].is_nil())?;
                expect("DLOCK.RELEASE", &replies[1], replies[1].as_int() == Some(0))?;
                expect(
                    "the head's DLOCK.ACQUIRE",
                    &replies[2],
                    replies[2].is_grant(),
                )?;
                self.holder = head;
            }
            Kind::LuaFair => {
                let [lock, list, timeouts, channel] = self.lua_keys();
                let tail = self.take_name();
                let head = format!("w{}", self.head);
                self.head += 1;
                let now = now_ms();
                ctl.queue(&[
                    "EVAL", FAIR_LOCK, "3", &lock, &list, &timeouts, LONG_MS, &tail, WAIT_MS, &now,
                ]);
                ctl.queue(&[
                    "EVALSHA",
                    &self.scripts.fair_unlock,
                    "4",
                    &lock,
                    &list,
                    &timeouts,
                    &channel,
                    "0",
                    LONG_MS,
                    &self.holder,
                    &now,
                ]);
                ctl.queue(&[
                    "EVALSHA",
                    &self.scripts.fair_lock,
                    "3",
                    &lock,
                    &list,
                    &timeouts,
                    LONG_MS,
                    &head,
                    WAIT_MS,
                    &now,
                ]);
                ctl.flush()?;
                let replies = ctl.read_n(3)?;
                expect(
                    "fair lock script (tail)",
                    &replies[0],
                    replies[0].as_int().is_some(),
                )?;
                expect(
                    "fair unlock script",
                    &replies[1],
                    replies[1].as_int() == Some(1),
                )?;
                expect("fair lock script (head)", &replies[2], replies[2].is_nil())?;
                self.holder = head;
            }
        }
        Ok(())
    }

    /// Server µs per round, from the commandstats of the rounds since RESETSTAT.
    fn cost(&self, ctl: &mut Conn, rounds: usize) -> Res<f64> {
        let stats = commandstats(ctl)?;
        let stat = |name: &str| stats.get(name).copied().unwrap_or_default();
        let per_round = |name: &str, calls_per_round: u64| -> Res<f64> {
            let s = stat(name);
            if s.calls != calls_per_round * rounds as u64 {
                bail!("{name}: {} calls counted for {rounds} rounds", s.calls);
            }
            Ok(s.usec as f64 / rounds as f64)
        };
        Ok(match self.kind {
            Kind::Blocked => per_round("dlock.release", 1)?,
            Kind::Reservations => per_round("dlock.release", 1)? + per_round("dlock.acquire", 1)?,
            Kind::LuaFair => per_round("evalsha", 2)?,
        })
    }

    /// Checks that no waiter still queued was granted anything, and closes
    /// every connection.
    fn finish(mut self) -> Res<()> {
        for (owner, conn) in self.waiters.iter_mut() {
            if conn.wait_readable(None)? {
                let reply = conn.read()?;
                bail!("{}: {owner}, still queued, was sent {reply:?}", self.key);
            }
        }
        for (_, conn) in self.waiters {
            conn.close();
        }
        Ok(())
    }
}

/// Clients blocked on the server (INFO clients).
fn blocked_clients(ctl: &mut Conn) -> Res<u64> {
    info(ctl, "clients")?
        .get("blocked_clients")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "INFO clients has no blocked_clients".into())
}

/// Median µs per round for each length of one kind.
fn measure(
    kind: Kind,
    config: &Config,
    server: &Server,
    scripts: &Scripts,
    ctl: &mut Conn,
) -> Res<Vec<f64>> {
    let blocks = config.pick(2, 5);
    let rounds = config.pick(10, 60);
    let lengths = lengths();
    let mut queues = Vec::new();
    for length in lengths {
        queues.push(Queue::setup(kind, length, server, scripts, ctl)?);
    }
    let mut costs: Vec<Vec<f64>> = vec![Vec::new(); lengths.len()];
    for block in 0..blocks {
        for k in 0..lengths.len() {
            let index = (block + k) % lengths.len();
            let reset = ctl.call(&["CONFIG", "RESETSTAT"])?;
            expect("CONFIG RESETSTAT", &reset, reset.is_ok())?;
            for _ in 0..rounds {
                queues[index].round(ctl)?;
            }
            costs[index].push(queues[index].cost(ctl, rounds)?);
        }
    }
    for queue in &queues {
        if kind != Kind::LuaFair {
            let waiting = dlock_info_int(ctl, &queue.key, "waiting")?.unwrap_or(-1);
            if waiting != queue.length as i64 {
                bail!(
                    "{}: {waiting} waiting after the rounds, expected {}",
                    queue.key,
                    queue.length
                );
            }
        }
    }
    for queue in queues {
        queue.finish()?;
    }
    flushall(ctl)?;
    Ok(costs.iter().map(|c| median(c)).collect())
}

pub fn run(config: &Config) -> Res<Section> {
    let server = Server::start(config, &["--maxclients", "20000"])?;
    let mut ctl = server.conn()?;
    let scripts = Scripts::load(&mut ctl)?;
    let set = ctl.call(&["CONFIG", "SET", "dlock.fair-reservation-ms", LONG_MS])?;
    expect("CONFIG SET dlock.fair-reservation-ms", &set, set.is_ok())?;
    let kinds = [Kind::Blocked, Kind::Reservations, Kind::LuaFair];
    let mut costs = Vec::new();
    for kind in kinds {
        costs.push(measure(kind, config, &server, &scripts, &mut ctl)?);
    }
    let (blocks, rounds) = (config.pick(2, 5), config.pick(10, 60));
    let lengths = lengths();
    let longest = thousands(lengths[2] as f64);

    let mut section = Section::new(
        4,
        "Queue-length scaling: the cost of a release that hands the lock on",
    );
    section.about = format!(
        "A holder and a queue of 1, 100 or {longest} entries behind it. Each round \
         adds one entry at the tail (so the length stays constant), releases \
         the lock and makes the head the holder. Blocked waiters are raw \
         connections that sent `DLOCK.ACQUIRE k w<i> {LONG_MS} BLOCK 0` and are \
         not read until granted (each waiter is added alone and the bench \
         waits for `blocked_clients` of INFO clients to count it, so the queue \
         order is known; the round releases by name from a control connection \
         and checks that the head waiter, and no other, got the grant); reservations are made \
         by `DLOCK.FAIR` without BLOCK (with `dlock.fair-reservation-ms` set to \
         {LONG_MS}) and the head takes the lock with `DLOCK.ACQUIRE`; the Lua \
         fair lock is RedissonFairLock's pair of scripts. Costs are server time \
         from `CONFIG RESETSTAT` and `INFO commandstats` (usec of the measured \
         commands / rounds), {blocks} blocks of {rounds} rounds per length, the \
         lengths interleaved; medians of the blocks."
    );
    let mut table = Table::new(
        "Server time per hand-off (µs) and its ratio to the same kind at length 1:",
        &[
            "queue length",
            "kind",
            "server time per round",
            "vs length 1",
            "Lua fair lock / this",
        ],
    );
    for (i, length) in lengths.iter().enumerate() {
        for (k, kind) in kinds.iter().enumerate() {
            table.row(vec![
                thousands(*length as f64),
                kind.name().to_string(),
                us(costs[k][i]),
                times(ratio(costs[k][i], costs[k][0])),
                times(ratio(costs[2][i], costs[k][i])),
            ]);
        }
    }
    section.tables.push(table);
    let last = lengths.len() - 1;
    section.targets.push(Target::at_most(
        &format!("{longest} blocked waiters: release cost / 1 waiter"),
        ratio(costs[0][last], costs[0][0]),
        1.5,
    ));
    section.targets.push(Target::at_most(
        &format!("{longest} FAIR reservations: release + acquire cost / 1 reservation"),
        ratio(costs[1][last], costs[1][0]),
        1.5,
    ));
    if lengths[2] < 10_000 {
        section.notes.push(format!(
            "The open-file limit allowed only {longest} blocked connections: raise it \
             (`ulimit -n 20000`) to measure 10,000."
        ));
    }
    section.notes.push(
        "The Lua fair lock's grant walks the whole timeout set (ZRANGE + one ZINCRBY per waiter), \
         so its cost grows linearly with the queue; dlock's queue is a B-tree indexed by arrival, \
         owner and reservation deadline."
            .into(),
    );
    section.commands = vec![
        "target/release/dlock-bench --only 4   # one round, for each kind:".into(),
        format!("#   blocked:      (new connection) DLOCK.ACQUIRE k w<n> {LONG_MS} BLOCK 0 ; INFO clients (until blocked_clients counts it) ; DLOCK.RELEASE k <holder> ; (head's connection) read its grant"),
        format!("#   reservations: DLOCK.FAIR k w<n> {LONG_MS} ; DLOCK.RELEASE k <holder> ; DLOCK.ACQUIRE k <head> {LONG_MS}"),
        format!("#   Lua fair:     EVAL <fair lock> 3 k k:queue k:timeouts {LONG_MS} w<n> {WAIT_MS} <now> ; EVALSHA <fair unlock> 4 k k:queue k:timeouts k:channel 0 {LONG_MS} <holder> <now> ; EVALSHA <fair lock> 3 k k:queue k:timeouts {LONG_MS} <head> {WAIT_MS} <now>"),
        "#   before each block: CONFIG RESETSTAT ; after it: INFO commandstats".into(),
    ];
    Ok(section)
}
