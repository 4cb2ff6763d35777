//! Scenario 15 (only on request): this build of the module against another
//! one (`DLOCK_MODULE_B`), each loaded into its own server, the same units
//! interleaved in short slices. For work on the module's speed: the ratio
//! of two builds measured directly, not as the difference of two ratios
//! against plain Redis taken in separate runs. Pipeline 16 only: there the
//! commands' own cost shows.

use std::path::PathBuf;

use super::load::{self, Case, Op, Plan};
use crate::report::{Section, Table};
use crate::scripts::Scripts;
use crate::server::Server;
use crate::stats::{thousands, times};
use crate::{bail, Config, Res};

const CONNECTIONS: usize = 8;
const UNITS: [Op; 2] = [Op::DlockPair, Op::Acquire];
/// Pipeline 16 only: there the commands' own cost shows.
const PIPELINE: usize = 16;

pub fn run(config: &Config) -> Res<Section> {
    let Some(other) = std::env::var_os("DLOCK_MODULE_B") else {
        bail!("scenario 15 needs DLOCK_MODULE_B: the path of the build to compare against");
    };
    let mut config_b = config.clone();
    config_b.module = PathBuf::from(other);
    let server_a = Server::start(config, &[])?;
    let server_b = Server::start(&config_b, &[])?;
    let scripts_a = Scripts::load(&mut server_a.conn()?)?;
    let scripts_b = Scripts::load(&mut server_b.conn()?)?;
    let rounds = config.pick(20, 150);
    let mut table = Table::new(
        "",
        &[
            "unit",
            "pipeline",
            "units/s, this build",
            "units/s, build B",
            "this / B",
            "middle half of the per-round ratios",
        ],
    );
    let mut targets = Vec::new();
    for op in UNITS {
        let cases = [
            Case {
                server: &server_a,
                scripts: &scripts_a,
                op,
            },
            Case {
                server: &server_b,
                scripts: &scripts_b,
                op,
            },
        ];
        let plan = Plan {
            connections: CONNECTIONS,
            pipeline: PIPELINE,
            slice: load::SLICE,
            rounds,
        };
        let rates = load::interleaved(&cases, plan, &format!("builds:{PIPELINE}"))?;
        table.row(vec![
            op.commands().to_string(),
            PIPELINE.to_string(),
            thousands(rates.median(0)),
            thousands(rates.median(1)),
            times(rates.ratio(0, 1)),
            rates.ratio_spread(0, 1),
        ]);
        // The cost of what this build adds (with `make bench`, the base
        // commit's build is B: issue 39's statistics), as context.
        targets.push(crate::report::Target::context(
            &format!(
                "{}, pipeline {PIPELINE}: this build / build B",
                op.commands()
            ),
            rates.ratio(0, 1),
        ));
    }
    let mut section = Section::new(15, "This build of the module against another");
    section.about = format!(
        "{} (this build) against {} (build B), each loaded into its own server; \
         {CONNECTIONS} connections, the two servers taking turns in slices of {} ms, \
         {rounds} rounds; ratios are medians of the per-round ratios.",
        config.module.display(),
        config_b.module.display(),
        load::SLICE.as_millis(),
    );
    section.tables.push(table);
    section.targets = targets;
    Ok(section)
}
