//! Scenario 17 (issue 27, leader election): how soon followers learn a new
//! leader. One lock is the leadership; its holder leads and a candidate
//! waits in the server's queue (`DLOCK.ACQUIRE ... BLOCK`). Three groups of
//! 16 followers watch it:
//!
//! * `DLOCK.WATCH k <last token> <timeout>`: the server answers when the
//!   newest token changes;
//! * polling `DLOCK.INFO k` every 100 ms;
//! * keyspace events: `SUBSCRIBE __keyspace@0__:k` (the server runs with
//!   `notify-keyspace-events Kgxd`), and `DLOCK.INFO k` on every message.
//!
//! Each round the leader releases; the server hands the lock to the
//! candidate in the same step. The figure is the time from the release
//! being sent to the last follower of a group knowing the new term (the
//! new fencing token). A follower that has not learnt it a second later
//! counts as a miss (then reads the lock once, to start the next round
//! knowing it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{dlock_info_int, expect, flushall, has_command, skipped, wait_for_waiting};
use crate::report::{Section, Table, Target};
use crate::resp::Conn;
use crate::server::Server;
use crate::stats::{median, percentile, ratio, times};
use crate::{bail, Config, Res};

const TITLE: &str = "Leader change: time until every follower knows the new leader";
const TARGET: &str =
    "leader change: p99 time to the last follower, DLOCK.WATCH / polling DLOCK.INFO every 100 ms";
const KEY: &str = "leader";
const FOLLOWERS: usize = 16;
const POLL_EVERY: Duration = Duration::from_millis(100);
/// A follower that has not learnt the new term this long after the release
/// missed it.
const MISS_AFTER: Duration = Duration::from_secs(1);
const TTL: &str = "60000";
/// WATCH's server timeout: the watcher then looks at the stop flag.
const WATCH_MS: &str = "1000";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Watch,
    Poll,
    PubSub,
}

impl Group {
    const ALL: [Group; 3] = [Group::Watch, Group::Poll, Group::PubSub];

    fn name(self) -> &'static str {
        match self {
            Group::Watch => "DLOCK.WATCH",
            Group::Poll => "polling DLOCK.INFO every 100 ms",
            Group::PubSub => "keyspace events + DLOCK.INFO",
        }
    }
}

/// What one follower knows: the first time it saw each token.
#[derive(Default)]
struct Follower {
    seen: Mutex<HashMap<i64, Instant>>,
}

impl Follower {
    fn learn(&self, token: i64) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.entry(token).or_insert_with(Instant::now);
        }
    }

    fn when(&self, token: i64) -> Option<Instant> {
        self.seen
            .lock()
            .ok()
            .and_then(|seen| seen.get(&token).copied())
    }
}

fn token_now(conn: &mut Conn) -> Res<i64> {
    Ok(dlock_info_int(conn, KEY, "token")?.unwrap_or(0))
}

/// The newest token of a DLOCK.WATCH reply, None for a timeout (null).
fn watch_token(reply: &crate::resp::Reply) -> Res<Option<i64>> {
    if reply.is_nil() {
        return Ok(None);
    }
    match reply.as_array() {
        Some([token, _, _]) => Ok(token.as_int()),
        _ => bail!("DLOCK.WATCH: unexpected reply {reply:?}"),
    }
}

fn follow(server: &Server, group: Group, me: &Follower, stop: &AtomicBool) -> Res<()> {
    let mut conn = server.conn()?;
    match group {
        Group::Watch => {
            let mut last = token_now(&mut conn)?;
            me.learn(last);
            while !stop.load(Ordering::SeqCst) {
                let reply = conn.call(&["DLOCK.WATCH", KEY, &last.to_string(), WATCH_MS])?;
                if let Some(token) = watch_token(&reply)? {
                    me.learn(token);
                    last = token;
                }
            }
        }
        Group::Poll => {
            while !stop.load(Ordering::SeqCst) {
                me.learn(token_now(&mut conn)?);
                std::thread::sleep(POLL_EVERY);
            }
        }
        Group::PubSub => {
            let mut sub = server.conn()?;
            let channel = format!("__keyspace@0__:{KEY}");
            let reply = sub.call(&["SUBSCRIBE", &channel])?;
            expect(
                "SUBSCRIBE",
                &reply,
                reply.as_array().is_some_and(|a| a.len() == 3),
            )?;
            me.learn(token_now(&mut conn)?);
            while !stop.load(Ordering::SeqCst) {
                if sub.wait_readable(Some(Duration::from_millis(100)))? {
                    let message = sub.read()?;
                    expect(
                        "keyspace event",
                        &message,
                        message.as_array().is_some_and(|a| a.len() == 3),
                    )?;
                    me.learn(token_now(&mut conn)?);
                }
            }
        }
    }
    Ok(())
}

pub fn run(config: &Config) -> Res<Section> {
    let server = Server::start(config, &["--notify-keyspace-events", "Kgxd"])?;
    let mut ctl = server.conn()?;
    if !has_command(&mut ctl, "dlock.watch")? {
        return Ok(skipped(
            17,
            TITLE,
            "this server has no DLOCK.WATCH yet (issue 27)",
            &[(TARGET, "<= 0.10x")],
        ));
    }
    flushall(&mut ctl)?;
    let rounds = config.pick(5, 60);
    let followers: Vec<Vec<Follower>> = Group::ALL
        .iter()
        .map(|_| (0..FOLLOWERS).map(|_| Follower::default()).collect())
        .collect();
    let stop = AtomicBool::new(false);
    // Per group: the time to the last follower in each round (ms), and the
    // misses.
    let mut lasts: Vec<Vec<f64>> = vec![Vec::new(); Group::ALL.len()];
    let mut misses = vec![0usize; Group::ALL.len()];

    let outcome: Res<()> = std::thread::scope(|scope| {
        let mut leader = server.conn()?;
        let granted = leader.call(&["DLOCK.ACQUIRE", KEY, "term-0", TTL])?;
        expect("DLOCK.ACQUIRE", &granted, granted.is_grant())?;
        let handles: Vec<_> = Group::ALL
            .iter()
            .enumerate()
            .flat_map(|(g, &group)| {
                let (followers, stop, server) = (&followers, &stop, &server);
                (0..FOLLOWERS).map(move |f| {
                    scope.spawn(move || -> Res<()> {
                        let outcome = follow(server, group, &followers[g][f], stop);
                        if outcome.is_err() {
                            stop.store(true, Ordering::SeqCst);
                        }
                        outcome
                    })
                })
            })
            .collect();
        let run = (|| -> Res<()> {
            let mut term = token_now(&mut ctl)?;
            let mut leader_owner = "term-0".to_string();
            for round in 1..=rounds {
                // Every follower knows the current term before the change.
                let settle = Instant::now() + Duration::from_secs(5);
                while !followers.iter().flatten().all(|f| f.when(term).is_some()) {
                    if stop.load(Ordering::SeqCst) {
                        bail!("a follower failed");
                    }
                    if Instant::now() > settle {
                        bail!("followers did not learn term {term} within 5 s");
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut candidate = server.conn()?;
                let candidate_owner = format!("term-{round}");
                candidate.queue(&[
                    "DLOCK.ACQUIRE",
                    KEY,
                    &candidate_owner,
                    TTL,
                    "BLOCK",
                    "10000",
                ]);
                candidate.flush()?;
                wait_for_waiting(&mut ctl, KEY, 1, Duration::from_secs(5))?;
                // The polls run at their own phases; the release comes at a
                // point of the poll period that varies from round to round.
                std::thread::sleep(Duration::from_millis(7 * round as u64 % 100));
                let released_at = Instant::now();
                let released = leader.call(&["DLOCK.RELEASE", KEY, &leader_owner])?;
                expect("DLOCK.RELEASE", &released, released.as_int() == Some(0))?;
                let grant = candidate.read()?;
                expect("the candidate's grant", &grant, grant.is_grant())?;
                let new_term = token_now(&mut ctl)?;
                if new_term == term || new_term == 0 {
                    bail!("the new term {new_term} is not a new token (was {term})");
                }
                let give_up = released_at + MISS_AFTER;
                for (g, group) in followers.iter().enumerate() {
                    while Instant::now() < give_up
                        && !group.iter().all(|f| f.when(new_term).is_some())
                    {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    let mut last = 0.0f64;
                    for follower in group {
                        match follower.when(new_term) {
                            Some(at) => {
                                last = last.max(
                                    at.saturating_duration_since(released_at).as_secs_f64()
                                        * 1000.0,
                                );
                            }
                            None => {
                                misses[g] += 1;
                                follower.learn(new_term);
                                last = last.max(MISS_AFTER.as_secs_f64() * 1000.0);
                            }
                        }
                    }
                    lasts[g].push(last);
                }
                leader = candidate;
                leader_owner = candidate_owner;
                term = new_term;
            }
            Ok(())
        })();
        stop.store(true, Ordering::SeqCst);
        for handle in handles {
            handle
                .join()
                .unwrap_or_else(|_| Err("follower thread panicked".into()))?;
        }
        run
    });
    outcome?;

    let p = |g: usize, q: f64| percentile(&lasts[g], q);
    let mut section = Section::new(17, TITLE);
    section.about = format!(
        "One lock is the leadership (`DLOCK.ACQUIRE {KEY} term-<n> {TTL}`); the next \
         candidate waits for it with `BLOCK`. {FOLLOWERS} followers per group, each a \
         thread with its own connection(s), track the current term (the fencing token): \
         `DLOCK.WATCH {KEY} <last token> {WATCH_MS}` in a loop; `DLOCK.INFO {KEY}` every \
         100 ms; `SUBSCRIBE __keyspace@0__:{KEY}` (server started with \
         `notify-keyspace-events Kgxd`) and `DLOCK.INFO {KEY}` on every message. In each \
         of {rounds} rounds, once every follower knows the current term, the leader \
         sends `DLOCK.RELEASE`, the server grants the candidate in the same step, and the \
         clock runs from the release being sent to the last follower of each group \
         knowing the new token. A follower that has not learnt it {} ms after the \
         release counts as a miss.",
        MISS_AFTER.as_millis()
    );
    let mut table = Table::new(
        "Release -> last follower knowing the new leader",
        &["followers", "p50", "p99", "max", "missed changes"],
    );
    for (g, group) in Group::ALL.iter().enumerate() {
        table.row(vec![
            group.name().to_string(),
            format!("{:.3} ms", median(&lasts[g])),
            format!("{:.3} ms", p(g, 99.0)),
            format!("{:.3} ms", p(g, 100.0)),
            format!("{} of {}", misses[g], rounds * FOLLOWERS),
        ]);
    }
    section.tables.push(table);
    section
        .targets
        .push(Target::at_most(TARGET, ratio(p(0, 99.0), p(1, 99.0)), 0.1));
    let mut none_missed = Target::at_most(
        "leader change: followers of DLOCK.WATCH that missed a change",
        misses[0] as f64,
        0.0,
    );
    none_missed.measured = misses[0].to_string();
    none_missed.goal = "0".into();
    section.targets.push(none_missed);
    section.notes.push(format!(
        "DLOCK.WATCH against keyspace events: {} at p99. Keyspace events are not \
         lost on a connection that stays up, but a subscriber that reconnects misses \
         what was published meanwhile, and each message costs a follower a read of \
         the lock; a watcher passes its last token, so a change it has not seen is \
         answered at once, even after a reconnect.",
        times(ratio(p(0, 99.0), p(2, 99.0)))
    ));
    section.commands = vec![
        "target/release/dlock-bench --only 17".into(),
        format!("#   leader:    DLOCK.ACQUIRE {KEY} term-<n> {TTL} ; ... ; DLOCK.RELEASE {KEY} term-<n>"),
        format!("#   candidate: DLOCK.ACQUIRE {KEY} term-<n+1> {TTL} BLOCK 10000"),
        format!("#   watch:     DLOCK.WATCH {KEY} <last token> {WATCH_MS} (loop)"),
        format!("#   polling:   DLOCK.INFO {KEY} ; sleep 100 ms (loop)"),
        format!("#   pub/sub:   SUBSCRIBE __keyspace@0__:{KEY} ; DLOCK.INFO {KEY} on every message"),
    ];
    Ok(section)
}
