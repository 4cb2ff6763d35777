//! Scenario 8: the module tax. Commands that are not dlock's own (pairs of
//! SET NX PX and DEL, GET and INCR on fresh keys) on a server with dlock
//! loaded against the same server without it, both running, interleaved.

use super::flushall;
use super::load::{self, Case, Op, Plan};
use crate::report::{Section, Table, Target};
use crate::resp::Conn;
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{thousands, times};
use crate::{Config, Res};

const CONNECTIONS: usize = 8;
const PIPELINE: usize = 16;
const OPS: [Op; 3] = [Op::SetNxDel, Op::Get, Op::Incr];

fn name(op: Op) -> &'static str {
    match op {
        Op::SetNxDel => "SET NX PX + DEL pairs",
        Op::Get => "GET (missing key)",
        Op::Incr => "INCR (new key)",
        _ => "",
    }
}

pub fn run(config: &Config) -> Res<Section> {
    let module = Server::start(config, &[])?;
    let plain = Server::start_plain(config, &[])?;
    let mut module_conn = module.conn()?;
    let mut plain_conn = plain.conn()?;
    let module_scripts = Scripts::load(&mut module_conn)?;
    let plain_scripts = Scripts::load(&mut plain_conn)?;
    let plan = Plan {
        connections: CONNECTIONS,
        pipeline: PIPELINE,
        slice: load::SLICE,
        rounds: config.pick(10, 150),
    };

    let mut table = Table::new(
        "",
        &[
            "workload",
            "units/s without dlock",
            "units/s with dlock",
            "with / without (median of per-round ratios)",
            "middle half of the per-round ratios",
        ],
    );
    let mut targets = Vec::new();
    for op in OPS {
        let cases = [
            Case {
                server: &module,
                scripts: &module_scripts,
                op,
            },
            Case {
                server: &plain,
                scripts: &plain_scripts,
                op,
            },
        ];
        let rates = load::interleaved(&cases, plan, "tax")?;
        let tax = rates.ratio(0, 1);
        table.row(vec![
            name(op).to_string(),
            thousands(rates.median(1)),
            thousands(rates.median(0)),
            times(tax),
            rates.ratio_spread(0, 1),
        ]);
        targets.push(Target::at_least(
            &config.tag(&format!("module tax: {} with dlock / without", name(op))),
            tax,
            0.98,
        ));
    }
    // A client blocked in DLOCK.WATCH for the whole measurement (a
    // follower waiting for a leader change): Redis must not call into the
    // module for the other keys' commands because of it. The watcher
    // blocks on its key (Redis signals it when a value arrives there)
    // instead of subscribing to keyspace events, which would have Redis
    // call the module for every SET ... PX and DEL of any key.
    let watched = Server::start(config, &[])?;
    let mut watched_conn = watched.conn()?;
    let watched_scripts = Scripts::load(&mut watched_conn)?;
    let mut watcher = watched.conn()?;
    watcher.queue(&["DLOCK.WATCH", "tax:watched", "0", "0"]);
    watcher.flush()?;
    wait_for_watchers(&mut watched_conn, 1)?;
    let cases = [
        Case {
            server: &watched,
            scripts: &watched_scripts,
            op: Op::SetNxDel,
        },
        Case {
            server: &plain,
            scripts: &plain_scripts,
            op: Op::SetNxDel,
        },
    ];
    let rates = load::interleaved(&cases, plan, "tax:watched")?;
    table.row(vec![
        format!(
            "{} (dlock, a client blocked in DLOCK.WATCH)",
            name(Op::SetNxDel)
        ),
        thousands(rates.median(1)),
        thousands(rates.median(0)),
        times(rates.ratio(0, 1)),
        rates.ratio_spread(0, 1),
    ]);
    targets.push(Target::at_least(
        &config.tag(&format!(
            "module tax: {} with dlock, a client blocked in DLOCK.WATCH / without",
            name(Op::SetNxDel)
        )),
        rates.ratio(0, 1),
        0.98,
    ));
    if watched_conn
        .call(&["INFO", "dlock"])?
        .as_text()
        .is_none_or(|info| !info.contains("dlock_watchers:1"))
    {
        crate::bail!("the watcher of the tax measurement stopped waiting during it");
    }
    watcher.close();
    flushall(&mut watched_conn)?;
    flushall(&mut module_conn)?;
    flushall(&mut plain_conn)?;
    let mut section = Section::new(
        8,
        "Module tax: other commands with and without dlock loaded",
    );
    section.about = format!(
        "Two servers started alike, one with dlock loaded and one without, both \
         running for the whole scenario. {CONNECTIONS} connections of the bench's own \
         load generator send batches of {PIPELINE} units on fresh keys (a unit is a \
         SET NX PX + DEL pair, a GET of a missing key or an INCR of a new key) and \
         check every reply. The two servers take turns in slices of {} ms, all \
         connections switching together, {} rounds of one slice each (the order \
         alternating); the ratio is the median of the per-round ratios. A unit is a \
         pair for SET + DEL, one command otherwise.",
        plan.slice.as_millis(),
        plan.rounds,
    );
    section.tables.push(table);
    section.targets = targets;
    section.notes.push(
        "Loading a lock module must not slow the cache and session traffic of the same \
         server: these commands touch no lock, so any cost is the module's hooks \
         (keyspace-event subscriptions, command filters, server events)."
            .into(),
    );
    section.notes.push(
        "The last row keeps a client blocked in DLOCK.WATCH for the whole measurement (a \
         follower waiting for a leader change). A watcher blocks on its key, which the \
         server signals when a value arrives there; for a string key that signal ends at \
         the server's first test. A keyspace-event subscription, the first design, had the \
         server call the module for every DEL and every SET ... PX for the rest of its \
         life: 0.87x (Redis 7.0), 0.89x (Redis 8.0) and 0.95x (Valkey 9) in the bench \
         of 2026-11-26 12:57."
            .into(),
    );
    section.commands = vec![
        format!("target/release/dlock-bench --only 8   # {CONNECTIONS} connections x batches of {PIPELINE}, k = tax:<case>:<round>:<connection>:<n>, on each server:"),
        format!("#   {} | {} | {}", Op::SetNxDel.commands(), Op::Get.commands(), Op::Incr.commands()),
        "#   the server without dlock: the command line above without --loadmodule".into(),
        "#   the last row: a third server with dlock, where another connection sent `DLOCK.WATCH tax:watched 0 0` first and stays blocked in it for the whole measurement".into(),
    ];
    Ok(section)
}

/// Waits (up to 5 s) until `INFO dlock` counts `count` blocked watchers.
fn wait_for_watchers(conn: &mut Conn, count: u64) -> Res<()> {
    let wanted = format!("dlock_watchers:{count}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let info = conn.call(&["INFO", "dlock"])?.as_text().unwrap_or_default();
        if info.lines().any(|line| line.trim() == wanted) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            crate::bail!("INFO dlock never counted {count} watcher(s): {info}");
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
