//! Scenario 8: the module tax. Commands that are not dlock's own (pairs of
//! SET NX PX and DEL, GET and INCR on fresh keys) on a server with dlock
//! loaded against the same server without it, both running, interleaved.

use std::time::Duration;

use super::flushall;
use super::load::{self, Op};
use crate::report::{Section, Table, Target};
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{median, ratio, thousands, times};
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
    let reps = config.pick(2, 7);
    let duration = Duration::from_millis(config.pick(150, 1000));

    let mut table = Table::new(
        "",
        &[
            "workload",
            "units/s without dlock",
            "units/s with dlock",
            "with / without (median of back-to-back ratios)",
            "lowest ratio",
        ],
    );
    let mut targets = Vec::new();
    for op in OPS {
        let (mut with, mut without, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..reps {
            let tag = format!("tax:{rep}");
            // Back to back, the order alternating between repetitions.
            let mut pair = [0.0f64; 2];
            for k in 0..2 {
                let on_module = (rep + k) % 2 == 0;
                let (server, conn, scripts) = if on_module {
                    (&module, &mut module_conn, &module_scripts)
                } else {
                    (&plain, &mut plain_conn, &plain_scripts)
                };
                flushall(conn)?;
                let rate = load::rate(server, scripts, op, CONNECTIONS, PIPELINE, duration, &tag)?;
                pair[usize::from(!on_module)] = rate;
            }
            with.push(pair[0]);
            without.push(pair[1]);
            ratios.push(ratio(pair[0], pair[1]));
        }
        flushall(&mut module_conn)?;
        flushall(&mut plain_conn)?;
        let tax = median(&ratios);
        table.row(vec![
            name(op).to_string(),
            thousands(median(&without)),
            thousands(median(&with)),
            times(tax),
            times(ratios.iter().cloned().fold(f64::INFINITY, f64::min)),
        ]);
        targets.push(Target::at_least(
            &format!("module tax: {} with dlock / without (issue 15)", name(op)),
            tax,
            0.98,
        ));
    }
    let mut section = Section::new(
        8,
        "Module tax: other commands with and without dlock loaded",
    );
    section.about = format!(
        "Two servers started alike, one with dlock loaded and one without, both \
         running for the whole scenario. {CONNECTIONS} connections of the bench's own \
         load generator send batches of {PIPELINE} units on fresh keys (a unit is a \
         SET NX PX + DEL pair, a GET of a missing key or an INCR of a new key) and \
         check every reply. Runs of {:.2} s, {reps} per workload and server, the two \
         servers back to back (the order alternating); the ratio is the median of the \
         back-to-back ratios. A unit is a pair for SET + DEL, one command otherwise.",
        duration.as_secs_f64()
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
        format!("target/release/dlock-bench --only 8   # {CONNECTIONS} connections x batches of {PIPELINE}, k = tax:<run>:<connection>:<n>, on each server:"),
        format!("#   {} | {} | {}", Op::SetNxDel.commands(), Op::Get.commands(), Op::Incr.commands()),
        "#   the server without dlock: the command line above without --loadmodule".into(),
    ];
    Ok(section)
}
