//! Scenario 14: instructions per command, counted by callgrind.
//!
//! Throughput on a shared machine moves by several percent between runs
//! made minutes apart (scenarios 2 and 8 show it), more than the costs
//! issue 15 is about. The number of instructions the server executes per
//! command does not: it is the same from run to run to well under 1%, so
//! this scenario gives the hot path's cost in a form that can be compared
//! across stops and machines.
//!
//! Each case runs on its own redis-server under callgrind, twice: `n` units
//! and `3n` units on fresh keys, pipelined. The difference of the two
//! runs' totals over `2n` units is the cost of one unit, without the fixed
//! costs of starting, connecting and stopping. Callgrind's per-object costs
//! give the share spent in libdlock.so itself.

use std::time::Duration;

use super::load::Op;
use crate::report::{Section, Table};
use crate::scripts::Scripts;
use crate::server::{Server, CALLGRIND_CACHE_ARGS};
use crate::stats::{thousands, times};
use crate::{bail, Config, Res};

/// Units sent per pipelined batch.
const BATCH: usize = 100;

struct Case {
    op: Op,
    with_module: bool,
    /// The row this case is compared with (a design on a server without
    /// the module).
    reference: usize,
}

const CASES: [Case; 5] = [
    Case {
        op: Op::DlockPair,
        with_module: true,
        reference: 1,
    },
    Case {
        op: Op::SetNxDel,
        with_module: false,
        reference: 1,
    },
    Case {
        op: Op::SetNxDel,
        with_module: true,
        reference: 1,
    },
    Case {
        op: Op::Acquire,
        with_module: true,
        reference: 4,
    },
    Case {
        op: Op::SetNx,
        with_module: false,
        reference: 4,
    },
];

fn name(op: Op) -> &'static str {
    match op {
        Op::DlockPair => "DLOCK.ACQUIRE + DLOCK.RELEASE",
        Op::SetNxDel => "SET NX PX + DEL",
        Op::Acquire => "DLOCK.ACQUIRE alone (the lock stays)",
        Op::SetNx => "SET NX PX alone (the key stays)",
        _ => "",
    }
}

/// What a callgrind run counted: instructions in all and in libdlock.so's
/// own functions (not in what they call), and misses of the simulated L1
/// instruction cache in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    total: u64,
    module: u64,
    /// `None` when the run simulated no cache.
    i1_misses: Option<u64>,
}

/// The object an `ob=`/`cob=` specification names: `(id) name` defines
/// an id, `(id)` refers to one, a name alone is not compressed.
fn object_name(objects: &mut std::collections::HashMap<String, String>, spec: &str) -> String {
    let spec = spec.trim();
    match spec.strip_prefix('(').and_then(|rest| rest.split_once(')')) {
        Some((id, "")) => objects.get(id).cloned().unwrap_or_default(),
        Some((id, name)) => {
            let name = name.trim().to_string();
            objects.insert(id.to_string(), name.clone());
            name
        }
        None => spec.to_string(),
    }
}

/// Reads a callgrind output file: the `summary:` line (`Ir` and, with the
/// cache simulation, `I1mr`, found by the `events:` line), and the `Ir`
/// self cost of every function of an object whose name ends in
/// `libdlock.so` (cost lines that follow a `calls=` line are the callee's
/// inclusive cost and are left out).
fn parse_callgrind(text: &str) -> Res<Counts> {
    let mut counts = Counts::default();
    let mut summary: Option<Vec<u64>> = None;
    let mut events: Vec<&str> = Vec::new();
    let mut objects: std::collections::HashMap<String, String> = Default::default();
    let mut in_module = false;
    let mut call_cost_next = false;
    for line in text.lines() {
        if let Some(names) = line.strip_prefix("events:") {
            events = names.split_whitespace().collect();
        } else if let Some(values) = line.strip_prefix("summary:") {
            summary = values
                .split_whitespace()
                .map(|value| value.parse::<u64>().ok())
                .collect();
        } else if let Some(spec) = line.strip_prefix("ob=") {
            in_module = object_name(&mut objects, spec).ends_with("libdlock.so");
        } else if let Some(spec) = line.strip_prefix("cob=") {
            // Names are compressed in one space for `ob=` and `cob=`: a
            // called object's line may define the id a later `ob=` uses.
            object_name(&mut objects, spec);
        } else if line.starts_with("calls=") {
            call_cost_next = true;
        } else if line
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '*'))
        {
            if std::mem::take(&mut call_cost_next) {
                continue;
            }
            // A position, then the costs in the order of `events:` (Ir
            // first; trailing zeros may be left out).
            if in_module {
                let cost = line.split_whitespace().nth(1).unwrap_or("0");
                counts.module += cost.parse::<u64>().unwrap_or(0);
            }
        }
    }
    let Some(summary) = summary else {
        bail!("no summary line in the callgrind output");
    };
    let event = |name: &str| {
        let index = events.iter().position(|event| *event == name)?;
        summary.get(index).copied()
    };
    counts.total = event("Ir").ok_or("no Ir in the callgrind summary")?;
    counts.i1_misses = event("I1mr");
    Ok(counts)
}

/// Starts a server under callgrind for `case`, sends `units` units on fresh
/// keys (every reply checked), stops it and reads its counts.
fn run_case(config: &Config, case: &Case, units: usize) -> Res<Counts> {
    let mut server = Server::start_callgrind(config, case.with_module)?;
    {
        let mut conn = server.conn()?;
        let scripts = Scripts::load(&mut conn)?;
        let mut sent = 0;
        let mut key = String::new();
        while sent < units {
            let batch = BATCH.min(units - sent);
            for i in 0..batch {
                key.clear();
                key.push_str("cg:");
                key.push_str(&(sent + i).to_string());
                for step in 0..case.op.len() {
                    case.op.queue(step, &mut conn, &scripts, &key, "owner-1");
                }
            }
            conn.flush()?;
            for _ in 0..batch {
                for step in 0..case.op.len() {
                    let reply = conn.read()?;
                    if !case.op.check(step, &reply) {
                        bail!("{:?} command {step}: unexpected reply {reply:?}", case.op);
                    }
                }
            }
            sent += batch;
        }
    }
    server.shut_down(Duration::from_secs(120))?;
    let text = std::fs::read_to_string(server.file("callgrind.out"))
        .map_err(|e| format!("callgrind wrote no counts: {e}"))?;
    parse_callgrind(&text)
}

fn valgrind_present() -> bool {
    std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

pub fn run(config: &Config) -> Res<Section> {
    let units = config.pick(1_000, 10_000);
    let mut section = Section::new(14, "Instructions per command (callgrind)");
    section.about = format!(
        "The instructions redis-server executes per unit of work, counted by valgrind's \
         callgrind: unlike throughput, the count does not depend on what else the machine \
         runs. Each case runs on its own server under callgrind, once with {units} units and \
         once with {} units on fresh keys (pipelined in batches of {BATCH}, every reply \
         checked); a unit costs the difference of the two totals divided by {}, so starting, \
         connecting and stopping cancel out. \"In libdlock.so\" is the module's own code \
         (callgrind's self cost of its functions); the rest of a DLOCK command is Redis: \
         parsing, the module API, the keyspace, the reply.",
        3 * units,
        2 * units
    );
    if !valgrind_present() {
        section.notes.push(
            "Not measured: valgrind is not installed (`make bench` installs it; \
             `scripts/ensure-deps.sh valgrind`)."
                .into(),
        );
        return Ok(section);
    }
    let mut per_unit = Vec::new();
    for case in &CASES {
        let small = run_case(config, case, units)?;
        let large = run_case(config, case, 3 * units)?;
        let span = (2 * units) as f64;
        per_unit.push((
            large.total.saturating_sub(small.total) as f64 / span,
            large.module.saturating_sub(small.module) as f64 / span,
            large
                .i1_misses
                .zip(small.i1_misses)
                .map(|(large, small)| large.saturating_sub(small) as f64 / span),
        ));
    }
    let mut table = Table::new(
        "",
        &[
            "unit",
            "server",
            "instructions per unit",
            "in libdlock.so",
            "against the reference, without dlock",
            "L1i misses per unit (simulated)",
        ],
    );
    for (index, case) in CASES.iter().enumerate() {
        let (total, module, i1_misses) = per_unit[index];
        let reference = per_unit[case.reference].0;
        table.row(vec![
            name(case.op).to_string(),
            if case.with_module {
                "with dlock"
            } else {
                "without dlock"
            }
            .to_string(),
            thousands(total),
            if case.with_module {
                thousands(module)
            } else {
                String::new()
            },
            format!(
                "{} of {}",
                times(total / reference),
                name(CASES[case.reference].op)
            ),
            i1_misses.map_or_else(|| "not simulated".into(), |misses| format!("{misses:.1}")),
        ]);
    }
    section.tables.push(table);
    section.notes.push(
        "A ratio here is instructions, not time: a DLOCK unit that runs more instructions \
         than its reference also does more of its work in Redis's module API (a context per \
         command, a key handle, a second lookup in RedisModule_ModuleTypeSetValue), whose \
         cost per instruction differs from SET's. Throughput is scenarios 1 and 2."
            .into(),
    );
    section.notes.push(
        "The last column is callgrind's cache simulation with one fixed geometry (L1 \
         instruction cache of 32 KB, 8-way, 64-byte lines): the misses a unit causes in the \
         code Redis and the module run. It explains time that instructions do not: Redis's \
         own per-command path already misses about once per function it calls, so every \
         line of module code a command runs competes with Redis's lines too. The count \
         depends on where the linker places the hot lines (which lines share a set), not \
         only on how many there are: compare it within a run, not across builds."
            .into(),
    );
    section.commands = vec![
        "target/release/dlock-bench --only 14   # per case, two servers started as:".into(),
        format!(
            "valgrind --tool=callgrind {} --callgrind-out-file=DIR/callgrind.out redis-server \
             --port PORT --bind 127.0.0.1 --save '' --appendonly no --daemonize no --dir DIR \
             --logfile server.log [--loadmodule target/release/libdlock.so]",
            CALLGRIND_CACHE_ARGS.join(" ")
        ),
        format!(
            "#   {units} then {} units on keys cg:<i>, batches of {BATCH}; SHUTDOWN NOSAVE; \
             read summary: (Ir, I1mr) and libdlock.so's self cost (Ir) from DIR/callgrind.out",
            3 * units
        ),
        "#   DLOCK.ACQUIRE k owner-1 30000 ; DLOCK.RELEASE k owner-1  |  SET k owner-1 NX PX 30000 ; DEL k  |  DLOCK.ACQUIRE k owner-1 30000  |  SET k owner-1 NX PX 30000".into(),
    ];
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_summary_and_the_module_self_cost() {
        let text = "\
events: Ir
summary: 1000
ob=(1) /usr/bin/redis-server
fl=(1) server.c
fn=(1) call
10 40
cob=(2) /work/target/release/libdlock.so
cfn=(2) acquire
calls=1 0
11 300
ob=(2)
fn=(2)
5 70
+2 30
calls=2 0
cob=(1)
cfn=(3) zmalloc
6 200
ob=(1)
fn=(3)
1 15
";
        let counts = parse_callgrind(text).expect("parses");
        assert_eq!(
            counts,
            Counts {
                total: 1000,
                module: 100,
                i1_misses: None
            }
        );
    }

    #[test]
    fn reads_instruction_cache_misses_by_the_events_line() {
        let text = "\
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 5000 900 800 70 20 10 3 2 1
ob=(1) /work/target/release/libdlock.so
fn=(1) acquire
5 70 10 0 2
+2 30
";
        let counts = parse_callgrind(text).expect("parses");
        assert_eq!(
            counts,
            Counts {
                total: 5000,
                module: 100,
                i1_misses: Some(70)
            }
        );
    }

    #[test]
    fn refuses_a_file_without_a_summary() {
        assert!(parse_callgrind("events: Ir\n").is_err());
    }
}
