//! Scenario 2: acquire + release cycles on distinct keys, pipelined pairs
//! from several connections: DLOCK.ACQUIRE + DLOCK.RELEASE against SET NX PX
//! + compare-and-delete and against the Lua lock + unlock pair.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::flushall;
use crate::report::{Section, Table, Target};
use crate::resp::{Conn, Reply};
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{median, ratio, thousands, times};
use crate::{bail, Config, Res};

const CONNECTIONS: usize = 4;
const DEPTH: usize = 16;
const TTL: &str = "60000";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Design {
    Dlock,
    SetNx,
    Lua,
}

impl Design {
    const ALL: [Design; 3] = [Design::Dlock, Design::SetNx, Design::Lua];

    fn name(self) -> &'static str {
        match self {
            Design::Dlock => "DLOCK.ACQUIRE + DLOCK.RELEASE",
            Design::SetNx => "SET NX PX + compare-and-delete (EVALSHA)",
            Design::Lua => "EVALSHA lock + EVALSHA unlock (re-entrant, hash)",
        }
    }

    /// Queues one acquire + release of `key`.
    fn queue(self, conn: &mut Conn, scripts: &Scripts, key: &str, owner: &str) {
        match self {
            Design::Dlock => {
                conn.queue(&["DLOCK.ACQUIRE", key, owner, TTL]);
                conn.queue(&["DLOCK.RELEASE", key, owner]);
            }
            Design::SetNx => {
                conn.queue(&["SET", key, owner, "NX", "PX", TTL]);
                conn.queue(&["EVALSHA", &scripts.compare_and_delete, "1", key, owner]);
            }
            Design::Lua => {
                let channel = format!("unlock:{key}");
                conn.queue(&["EVALSHA", &scripts.lock, "1", key, TTL, owner]);
                conn.queue(&[
                    "EVALSHA",
                    &scripts.unlock,
                    "2",
                    key,
                    &channel,
                    "0",
                    TTL,
                    owner,
                ]);
            }
        }
    }

    /// Whether the replies of one pair say: acquired, then released.
    fn pair_ok(self, acquire: &Reply, release: &Reply) -> bool {
        match self {
            Design::Dlock => acquire.is_grant() && release.as_int() == Some(0),
            Design::SetNx => acquire.is_ok() && release.as_int() == Some(1),
            Design::Lua => acquire.is_nil() && release.as_int() == Some(1),
        }
    }

    fn commands(self) -> &'static str {
        match self {
            Design::Dlock => "DLOCK.ACQUIRE k owner 60000 ; DLOCK.RELEASE k owner",
            Design::SetNx => "SET k owner NX PX 60000 ; EVALSHA <compare-and-delete> 1 k owner",
            Design::Lua => {
                "EVALSHA <lock> 1 k 60000 owner ; EVALSHA <unlock> 2 k unlock:k 0 60000 owner"
            }
        }
    }
}

pub fn run(config: &Config) -> Res<Section> {
    let server = Server::start(config, &[])?;
    let mut conn = server.conn()?;
    let scripts = Scripts::load(&mut conn)?;
    let reps = config.pick(1, 5);
    let duration = Duration::from_millis(config.pick(250, 2000));
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Design::ALL.len()];
    for rep in 0..reps {
        for k in 0..Design::ALL.len() {
            let index = (rep + k) % Design::ALL.len();
            flushall(&mut conn)?;
            let rate = measure(&server, &scripts, Design::ALL[index], duration, rep)?;
            rates[index].push(rate);
            let left = conn.call(&["DBSIZE"])?;
            if left.as_int() != Some(0) {
                bail!(
                    "{}: {left:?} keys left after the run",
                    Design::ALL[index].name()
                );
            }
        }
    }
    let paired = |a: usize, b: usize| -> f64 {
        let ratios: Vec<f64> = rates[a]
            .iter()
            .zip(&rates[b])
            .map(|(x, y)| ratio(*x, *y))
            .collect();
        median(&ratios)
    };
    let mut section = Section::new(2, "Acquire + release cycles on distinct keys");
    section.about = format!(
        "{CONNECTIONS} connections, each sending batches of {DEPTH} pipelined \
         acquire + release pairs ({} commands per batch) on keys of its own, a \
         new key for every pair, and checking every reply (the acquire must \
         grant, the release must free the key). Runs of {:.2} s, {reps} per \
         design, interleaved; medians, and ratios as medians of back-to-back runs.",
        2 * DEPTH,
        duration.as_secs_f64(),
    );
    let mut table = Table::new(
        "",
        &[
            "design",
            "pairs/s",
            "commands/s",
            "vs SET NX PX + CAD",
            "vs Lua pair",
        ],
    );
    for (index, design) in Design::ALL.iter().enumerate() {
        let pairs = median(&rates[index]);
        table.row(vec![
            design.name().to_string(),
            thousands(pairs),
            thousands(2.0 * pairs),
            times(paired(index, 1)),
            times(paired(index, 2)),
        ]);
    }
    section.tables.push(table);
    section.targets.push(Target::at_least(
        "acquire+release pairs: DLOCK / SET NX PX + compare-and-delete",
        paired(0, 1),
        0.90,
    ));
    section.targets.push(Target::at_least(
        "acquire+release pairs: DLOCK / Lua lock + unlock",
        paired(0, 2),
        2.0,
    ));
    section.commands = vec![format!(
        "target/release/dlock-bench --only 2   # {CONNECTIONS} connections x batches of {DEPTH} pairs, k = pair:<connection>:<n>"
    )];
    for design in Design::ALL {
        section.commands.push(format!("#   {}", design.commands()));
    }
    Ok(section)
}

/// Pairs per second of one design over `duration`.
fn measure(
    server: &Server,
    scripts: &Scripts,
    design: Design,
    duration: Duration,
    rep: usize,
) -> Res<f64> {
    let barrier = Barrier::new(CONNECTIONS);
    let results: Vec<Res<(u64, Duration)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CONNECTIONS)
            .map(|index| {
                let barrier = &barrier;
                scope.spawn(move || -> Res<(u64, Duration)> {
                    let conn = server.conn();
                    let owner = format!("owner-{index}");
                    barrier.wait();
                    let mut conn = conn?;
                    let start = Instant::now();
                    let deadline = start + duration;
                    let mut pairs = 0u64;
                    while Instant::now() < deadline {
                        for i in 0..DEPTH {
                            let key = format!("pair:{rep}:{index}:{}", pairs + i as u64);
                            design.queue(&mut conn, scripts, &key, &owner);
                        }
                        conn.flush()?;
                        for _ in 0..DEPTH {
                            let acquire = conn.read()?;
                            let release = conn.read()?;
                            if !design.pair_ok(&acquire, &release) {
                                bail!(
                                    "{}: acquire {acquire:?}, release {release:?}",
                                    design.name()
                                );
                            }
                        }
                        pairs += DEPTH as u64;
                    }
                    Ok((pairs, start.elapsed()))
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
        let (pairs, elapsed) = result?;
        total += pairs;
        longest = longest.max(elapsed);
    }
    Ok(total as f64 / longest.as_secs_f64())
}
