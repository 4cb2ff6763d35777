//! Scenario 8: the module tax. Commands that are not dlock's own (pairs of
//! SET NX PX and DEL, GET and INCR on fresh keys) on a server with dlock
//! loaded against the same server without it, both running, interleaved.

use super::flushall;
use super::load::{self, Case, Op, Plan};
use crate::report::{Section, Table, Target};
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
    // The first DLOCK.WATCH that blocks registers a subscription to the
    // generic keyspace events for the server's life (Redis 7.0 has no way
    // to drop it): SET ... PX and DEL then each call into the module.
    let watched = Server::start(config, &[])?;
    let mut watched_conn = watched.conn()?;
    let watched_scripts = Scripts::load(&mut watched_conn)?;
    let answer = watched_conn.call(&["DLOCK.WATCH", "tax:watched", "0", "1"])?;
    if !answer.is_nil() {
        crate::bail!(
            "DLOCK.WATCH of a free key with token 0 replied {answer:?}, not null at its timeout"
        );
    }
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
        format!("{} (dlock after a DLOCK.WATCH)", name(Op::SetNxDel)),
        thousands(rates.median(1)),
        thousands(rates.median(0)),
        times(rates.ratio(0, 1)),
        rates.ratio_spread(0, 1),
    ]);
    targets.push(Target::context(
        &config.tag(&format!(
            "module tax: {} with dlock after a DLOCK.WATCH / without",
            name(Op::SetNxDel)
        )),
        rates.ratio(0, 1),
    ));
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
    section.commands = vec![
        format!("target/release/dlock-bench --only 8   # {CONNECTIONS} connections x batches of {PIPELINE}, k = tax:<case>:<round>:<connection>:<n>, on each server:"),
        format!("#   {} | {} | {}", Op::SetNxDel.commands(), Op::Get.commands(), Op::Incr.commands()),
        "#   the server without dlock: the command line above without --loadmodule".into(),
        "#   the last row: a third server with dlock, sent `DLOCK.WATCH tax:watched 0 1` (blocks 1 ms, registers the keyspace subscription) first".into(),
    ];
    Ok(section)
}
