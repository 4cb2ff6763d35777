//! Scenario 2: acquire + release cycles on distinct keys, from the bench's
//! own pipelined load generator (every reply checked), at pipeline 16 and 1:
//! DLOCK.ACQUIRE + DLOCK.RELEASE against SET NX PX + DEL (the unsafe floor),
//! SET NX PX + compare-and-delete and the Lua lock + unlock pair, each
//! reference design run both on a server with dlock loaded and on one
//! without it (plain Redis, the reference of issue 15's pair target), and
//! the floor module's pair (bench/floor: a lock's Redis calls and nothing
//! else), loaded beside dlock, which splits dlock's gap to SET NX PX + DEL
//! into the module API's share and dlock's own.

use super::load::{self, Op, Plan};
use crate::report::{Section, Table, Target};
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{thousands, times};
use crate::{Config, Res};

const CONNECTIONS: usize = 8;
const PIPELINES: [usize; 2] = [16, 1];

/// One design on one server.
#[derive(Clone, Copy)]
struct Case {
    op: Op,
    plain: bool,
}

const CASES: [Case; 8] = [
    Case {
        op: Op::DlockPair,
        plain: false,
    },
    Case {
        op: Op::FloorPair,
        plain: false,
    },
    Case {
        op: Op::SetNxDel,
        plain: true,
    },
    Case {
        op: Op::SetNxDel,
        plain: false,
    },
    Case {
        op: Op::SetNxCad,
        plain: true,
    },
    Case {
        op: Op::SetNxCad,
        plain: false,
    },
    Case {
        op: Op::LuaPair,
        plain: true,
    },
    Case {
        op: Op::LuaPair,
        plain: false,
    },
];
/// Indexes in CASES of the references.
const FLOOR: usize = 1;
const SETDEL_PLAIN: usize = 2;
const CAD_MODULE: usize = 5;
const LUA_MODULE: usize = 7;

fn op_name(op: Op) -> &'static str {
    match op {
        Op::DlockPair => "DLOCK.ACQUIRE + DLOCK.RELEASE",
        Op::FloorPair => "FLOOR.ACQUIRE + FLOOR.RELEASE (floor module)",
        Op::SetNxDel => "SET NX PX + DEL (unsafe floor)",
        Op::SetNxCad => "SET NX PX + compare-and-delete (EVALSHA)",
        Op::LuaPair => "EVALSHA lock + EVALSHA unlock (re-entrant, hash)",
        Op::Acquire | Op::FloorAcquire | Op::SetNx | Op::LuaAcquire | Op::Get | Op::Incr => "",
    }
}

pub fn run(config: &Config) -> Res<Section> {
    let floor = config.floor_args();
    let floor: Vec<&str> = floor.iter().map(String::as_str).collect();
    let module = Server::start(config, &floor)?;
    let plain = Server::start_plain(config, &[])?;
    let mut module_conn = module.conn()?;
    let mut plain_conn = plain.conn()?;
    let module_scripts = Scripts::load(&mut module_conn)?;
    let plain_scripts = Scripts::load(&mut plain_conn)?;
    let slice = load::SLICE;
    let rounds = config.pick(6, 150);
    let cases: Vec<load::Case> = CASES
        .iter()
        .map(|case| {
            let (server, scripts) = if case.plain {
                (&plain, &plain_scripts)
            } else {
                (&module, &module_scripts)
            };
            load::Case {
                server,
                scripts,
                op: case.op,
            }
        })
        .collect();

    let mut section = Section::new(2, "Acquire + release cycles on distinct keys");
    section.about = format!(
        "{CONNECTIONS} connections of the bench's own load generator, each sending \
         batches of pipelined acquire + release pairs (pipeline 16: 16 pairs, 32 \
         commands per batch; pipeline 1: every command waits for the previous reply) \
         on keys of its own, a new key for every pair, checking every reply (the \
         acquire must grant, the release must free the key). Each reference design \
         runs on two servers started alike, one with dlock loaded and one without \
         (plain Redis); the DLOCK pair needs the module. The server with dlock also \
         loads the floor module (`bench/floor`): `FLOOR.ACQUIRE` and `FLOOR.RELEASE` make \
         exactly the Redis calls of an uncontended DLOCK pair (open the key, store a value \
         of a module type, set its expire, reply `[token, 1, owner]`; open, compare the \
         owner, delete, reply 0; one clock read each) and nothing else: the least any \
         module lock can cost on this Redis. The cases take turns in \
         slices of {} ms, all connections switching together, {rounds} rounds of one \
         slice per case (the starting case rotating); medians, and ratios as medians \
         of the per-round ratios. After every slice the server must hold no key.",
        slice.as_millis(),
    );
    let mut table = Table::new(
        "",
        &[
            "pipeline",
            "design",
            "server",
            "pairs/s",
            "commands/s",
            "vs SET NX PX + DEL, no module",
            "vs SET NX PX + CAD, same server",
            "vs Lua pair, same server",
            "vs floor module pair, same server",
        ],
    );
    for pipeline in PIPELINES {
        let plan = Plan {
            connections: CONNECTIONS,
            pipeline,
            slice,
            rounds,
        };
        let rates = load::interleaved(&cases, plan, &format!("pair:{pipeline}"))?;
        let paired = |a: usize, b: usize| rates.ratio(a, b);
        for (index, case) in CASES.iter().enumerate() {
            let pairs = rates.median(index);
            // The same-server references: the module server's for a case
            // on it, the plain server's for a plain case.
            let (cad, lua) = if case.plain {
                (CAD_MODULE - 1, LUA_MODULE - 1)
            } else {
                (CAD_MODULE, LUA_MODULE)
            };
            table.row(vec![
                pipeline.to_string(),
                op_name(case.op).to_string(),
                if case.plain {
                    "without dlock".into()
                } else {
                    "with dlock".into()
                },
                thousands(pairs),
                thousands(2.0 * pairs),
                times(paired(index, SETDEL_PLAIN)),
                times(paired(index, cad)),
                times(paired(index, lua)),
                if case.plain {
                    String::new()
                } else {
                    times(paired(index, FLOOR))
                },
            ]);
        }
        // Issue 27: on Redis 7.0 the goal is dlock's own code against the
        // floor module's pair, at both pipelines; on newer servers the pair
        // against SET NX PX + DEL without the module, at pipeline 16.
        let what = |text: &str| config.tag(&format!("pairs, pipeline {pipeline}: {text}"));
        let setdel = paired(0, SETDEL_PLAIN);
        let own = paired(0, FLOOR);
        // Judged against the floor module where the module API is the
        // bound: always on Redis 7.0, and at pipeline 16 on Redis 8 (issue
        // 39); SET NX PX + DEL stays as context.
        if config.floor_goals || (pipeline == 16 && config.floor_goal_at_16) {
            section.targets.push(Target::at_least(
                &what("DLOCK / floor module (dlock's own code)"),
                own,
                0.95,
            ));
            section.targets.push(Target::context(
                &what("DLOCK / SET NX PX + DEL without the module"),
                setdel,
            ));
        } else if pipeline == 16 {
            section.targets.push(Target::at_least(
                &what("DLOCK / SET NX PX + DEL without the module"),
                setdel,
                0.90,
            ));
            section.targets.push(Target::context(
                &what("DLOCK / floor module (dlock's own code)"),
                own,
            ));
        } else {
            section.targets.push(Target::context(
                &what("DLOCK / SET NX PX + DEL without the module"),
                setdel,
            ));
            section.targets.push(Target::context(
                &what("DLOCK / floor module (dlock's own code)"),
                own,
            ));
        }
        section.targets.push(Target::context(
            &what("floor module / SET NX PX + DEL without the module (the module API's ceiling)"),
            paired(FLOOR, SETDEL_PLAIN),
        ));
        if pipeline == 16 {
            section.targets.push(Target::at_least(
                &what("DLOCK / SET NX PX + compare-and-delete (same server)"),
                paired(0, CAD_MODULE),
                0.90,
            ));
            section.targets.push(Target::at_least(
                &what("DLOCK / Lua lock + unlock (same server)"),
                paired(0, LUA_MODULE),
                2.0,
            ));
        }
    }
    section.tables.push(table);
    section.notes.push(
        "\"SET NX PX + DEL\" is not a safe lock (DEL frees the key whoever holds it); it is \
         the least any lock on Redis can cost, hence the reference of the pair target. The \
         rows \"with dlock\" of the reference designs show the module's tax on commands that \
         are not its own (scenario 8 measures it alone)."
            .into(),
    );
    section
        .notes
        .extend(super::redis8_ceiling_note(&config.server_label));
    section.commands = vec![format!(
        "target/release/dlock-bench --only 2   # {CONNECTIONS} connections x batches of 16 pairs (or 1 command at a time), k = pair:<pipeline>:<case>:<round>:<connection>:<n>, o = owner-<connection>"
    )];
    for op in [
        Op::DlockPair,
        Op::FloorPair,
        Op::SetNxDel,
        Op::SetNxCad,
        Op::LuaPair,
    ] {
        section.commands.push(format!("#   {}", op.commands()));
    }
    Ok(section)
}
