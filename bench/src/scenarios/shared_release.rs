//! Scenario 11 (issue 11): the server cost of one shared release with 1,
//! 100 and 10,000 shared holders, the count kept constant (each round adds
//! one holder, then the oldest releases), against the read unlock of
//! RReadWriteLock's algorithm, which walks every holder's expiry keys.
//! Costs come from `CONFIG RESETSTAT` + `INFO commandstats`, in blocks of
//! rounds interleaved over the holder counts; medians of the blocks.

use std::collections::VecDeque;

use super::{commandstats, expect, flushall, has_shared, skipped};
use crate::report::{Section, Table, Target};
use crate::resp::Conn;
use crate::scripts::{Scripts, RW_READ_LOCK};
use crate::server::Server;
use crate::stats::{median, ratio, thousands, times, us};
use crate::{bail, Config, Res};

const COUNTS: [usize; 3] = [1, 100, 10_000];
/// Lease of every hold: nothing runs out during the scenario.
const LONG_MS: &str = "3600000";
const TARGET: &str = "shared release cost: 10,000 holders / 1 holder (issue 11)";
const TITLE: &str = "Shared release cost against the number of shared holders";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dlock,
    Redisson,
}

/// One lock with `count` shared holders, oldest first.
struct Holders {
    kind: Kind,
    key: String,
    channel: String,
    owners: VecDeque<String>,
    next: usize,
}

impl Holders {
    fn prefix(&self, owner: &str) -> String {
        format!("{}:{owner}:rwlock_timeout", self.key)
    }

    /// Queues the acquire of a new holder (not measured: DLOCK.ACQUIRE, or
    /// EVAL for the Lua read lock so that it counts apart from EVALSHA).
    fn queue_add(&mut self, conn: &mut Conn) {
        let owner = format!("h{}", self.next);
        self.next += 1;
        match self.kind {
            Kind::Dlock => conn.queue(&["DLOCK.ACQUIRE", &self.key, &owner, LONG_MS, "SHARED"]),
            Kind::Redisson => {
                let prefix = self.prefix(&owner);
                let write_name = format!("{owner}:write");
                conn.queue(&[
                    "EVAL",
                    RW_READ_LOCK,
                    "2",
                    &self.key,
                    &prefix,
                    LONG_MS,
                    &owner,
                    &write_name,
                ]);
            }
        }
        self.owners.push_back(owner);
    }

    fn check_add(&self, reply: &crate::resp::Reply) -> Res<()> {
        match self.kind {
            Kind::Dlock => expect("DLOCK.ACQUIRE SHARED", reply, reply.is_grant()),
            Kind::Redisson => expect("read lock script", reply, reply.is_nil()),
        }
    }

    fn setup(kind: Kind, conn: &mut Conn, count: usize) -> Res<Holders> {
        let mut holders = Holders {
            kind,
            key: format!(
                "shared:{}:{count}",
                if kind == Kind::Dlock { "dlock" } else { "rw" }
            ),
            channel: String::new(),
            owners: VecDeque::new(),
            next: 0,
        };
        holders.channel = format!("redisson_rwlock:{}", holders.key);
        let mut left = count;
        while left > 0 {
            let batch = left.min(1000);
            for _ in 0..batch {
                holders.queue_add(conn);
            }
            conn.flush()?;
            for _ in 0..batch {
                let reply = conn.read()?;
                holders.check_add(&reply)?;
            }
            left -= batch;
        }
        Ok(holders)
    }

    /// One round: a new holder, then the oldest releases (measured).
    fn round(&mut self, conn: &mut Conn, scripts: &Scripts) -> Res<()> {
        self.queue_add(conn);
        conn.flush()?;
        let reply = conn.read()?;
        self.check_add(&reply)?;
        let oldest = self.owners.pop_front().ok_or("no holder")?;
        match self.kind {
            Kind::Dlock => {
                let reply = conn.call(&["DLOCK.RELEASE", &self.key, &oldest, "SHARED"])?;
                expect("DLOCK.RELEASE SHARED", &reply, reply.as_int() == Some(0))
            }
            Kind::Redisson => {
                let prefix = self.prefix(&oldest);
                let reply = conn.call(&[
                    "EVALSHA",
                    &scripts.rw_read_unlock,
                    "4",
                    &self.key,
                    &self.channel,
                    &prefix,
                    &self.key,
                    "0",
                    &oldest,
                ])?;
                // 0: other readers remain (1 only when the last one left).
                let expected = if self.owners.is_empty() { 1 } else { 0 };
                expect(
                    "read unlock script",
                    &reply,
                    reply.as_int() == Some(expected),
                )
            }
        }
    }

    /// Server µs per measured release since the last RESETSTAT.
    fn cost(&self, conn: &mut Conn, rounds: usize) -> Res<(f64, f64)> {
        let stats = commandstats(conn)?;
        let (release, acquire) = match self.kind {
            Kind::Dlock => ("dlock.release", "dlock.acquire"),
            Kind::Redisson => ("evalsha", "eval"),
        };
        let measured = stats.get(release).copied().unwrap_or_default();
        if measured.calls != rounds as u64 {
            bail!(
                "{release}: {} calls in a block of {rounds} rounds",
                measured.calls
            );
        }
        let added = stats.get(acquire).copied().unwrap_or_default();
        Ok((
            measured.usec as f64 / rounds as f64,
            ratio(added.usec as f64, added.calls as f64),
        ))
    }
}

pub fn run(config: &Config) -> Res<Section> {
    let server = Server::start(config, &[])?;
    let mut conn = server.conn()?;
    if !has_shared(&mut conn)? {
        return Ok(skipped(
            11,
            TITLE,
            "this server's DLOCK.ACQUIRE does not take SHARED yet (issue 11)",
            &[(TARGET, "<= 2.00x")],
        ));
    }
    let scripts = Scripts::load(&mut conn)?;
    flushall(&mut conn)?;
    let blocks = config.pick(1, 5);
    let rounds = config.pick(10, 40);
    let kinds = [Kind::Dlock, Kind::Redisson];
    // costs[kind][count] = (release µs, acquire µs) per block
    let mut costs: Vec<Vec<Vec<(f64, f64)>>> = vec![vec![Vec::new(); COUNTS.len()]; 2];
    let mut locks: Vec<Vec<Holders>> = Vec::new();
    for kind in kinds {
        let mut row = Vec::new();
        for count in COUNTS {
            row.push(Holders::setup(kind, &mut conn, count)?);
        }
        locks.push(row);
    }
    for block in 0..blocks {
        for (k, row) in locks.iter_mut().enumerate() {
            for step in 0..COUNTS.len() {
                let c = (block + step) % COUNTS.len();
                let reset = conn.call(&["CONFIG", "RESETSTAT"])?;
                expect("CONFIG RESETSTAT", &reset, reset.is_ok())?;
                for _ in 0..rounds {
                    row[c].round(&mut conn, &scripts)?;
                }
                costs[k][c].push(row[c].cost(&mut conn, rounds)?);
            }
        }
    }
    let release = |k: usize, c: usize| median(&costs[k][c].iter().map(|x| x.0).collect::<Vec<_>>());
    let acquire = |k: usize, c: usize| median(&costs[k][c].iter().map(|x| x.1).collect::<Vec<_>>());

    let mut section = Section::new(11, TITLE);
    section.about = format!(
        "One lock with 1, 100 or 10,000 shared holders (distinct owners). Each round \
         adds one holder and then releases the oldest one, so the count stays \
         constant. dlock: `DLOCK.ACQUIRE k h<n> {LONG_MS} SHARED`, then \
         `DLOCK.RELEASE k <oldest> SHARED` (measured). Redisson: RReadWriteLock's read \
         lock (EVAL) and read unlock (EVALSHA, measured), whose unlock walks every \
         holder's expiry keys to recompute the lock's PTTL. Server time from `CONFIG \
         RESETSTAT` and `INFO commandstats`, {blocks} blocks of {rounds} rounds per \
         count, the counts interleaved; medians of the blocks."
    );
    let mut table = Table::new(
        "",
        &[
            "shared holders",
            "design",
            "release cost",
            "vs 1 holder",
            "acquire cost (a new holder)",
            "Redisson / dlock (release)",
        ],
    );
    for (c, count) in COUNTS.iter().enumerate() {
        for (k, name) in [
            "dlock: DLOCK.RELEASE SHARED",
            "RReadWriteLock's read unlock (Lua)",
        ]
        .iter()
        .enumerate()
        {
            table.row(vec![
                thousands(*count as f64),
                name.to_string(),
                us(release(k, c)),
                times(ratio(release(k, c), release(k, 0))),
                us(acquire(k, c)),
                times(ratio(release(1, c), release(k, c))),
            ]);
        }
    }
    section.tables.push(table);
    let last = COUNTS.len() - 1;
    section.targets.push(Target::at_most(
        TARGET,
        ratio(release(0, last), release(0, 0)),
        2.0,
    ));
    section.commands = vec![
        "target/release/dlock-bench --only 11   # one round, for each design:".into(),
        format!("#   dlock:    DLOCK.ACQUIRE k h<n> {LONG_MS} SHARED ; DLOCK.RELEASE k <oldest> SHARED"),
        format!("#   Redisson: EVAL <read lock> 2 k k:h<n>:rwlock_timeout {LONG_MS} h<n> h<n>:write ; EVALSHA <read unlock> 4 k redisson_rwlock:k k:<oldest>:rwlock_timeout k 0 <oldest>"),
        "#   before each block: CONFIG RESETSTAT ; after it: INFO commandstats".into(),
    ];
    Ok(section)
}
