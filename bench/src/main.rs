//! dlock-bench: measures dlock's commands against the usual client-side lock
//! designs on a real redis-server, and writes docs/benchmarks.md.
//!
//! ```text
//! dlock-bench [--quick] [--only 1,3] [--out FILE] [--svg FILE] [--no-pin]
//! ```
//!
//! * `--quick` (or `QUICK=1`): every scenario briefly (< 60 s); the report
//!   goes to a temporary file unless `--out` is given.
//! * `--only`: run only these scenarios (7 needs 3's runs); a scenario whose
//!   commands the server lacks is reported as not available, never an error.
//! * `--no-pin`: do not pin the server to core 0 and the load to core 1.
//!
//! `DLOCK_SERVER` (default `redis-server`), `DLOCK_BENCHMARK` (default
//! `redis-benchmark`) and `DLOCK_MODULE` (default
//! `target/release/libdlock.so`) select the binaries, `DLOCK_FLOOR_MODULE`
//! (default `target/release/libdlock_floor.so`, the `bench/floor` crate)
//! the floor module of scenarios 1 and 2; `DLOCK_BENCH_TRACE`
//! (any value) prints every round's rates of the interleaved comparisons
//! (scenarios 1, 2, 8 and 15) and every lease-expiry round of dlock's
//! (scenario 5: when the grant was made and when it was received) to
//! stderr. Scenario 15 runs only when named
//! in `--only`: it compares the module against the build at
//! `DLOCK_MODULE_B`, for work on the module's speed.
//!
//! `DLOCK_BENCH_REDIS8` and `DLOCK_BENCH_VALKEY` (set by `make bench` from
//! scripts/fetch-redis8.sh and scripts/fetch-valkey.sh) name the servers on
//! which scenarios 1, 2 and 8 run again, judged by issue 27's goals for
//! servers whose module API costs less (against SET NX PX rather than the
//! floor module).
//!
//! The bench fails only on errors (a server that does not start, an
//! unexpected reply, two holders of one lock at once), never on a missed
//! target: those are reported as MISSED.

mod report;
mod resp;
mod scenarios;
mod scripts;
mod server;
mod stats;
mod sys;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use report::{RunInfo, Section};

/// Errors are reported as text; the bench stops at the first one.
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Returns early with a formatted error.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(format!($($arg)*).into())
    };
}

/// What to run and where.
#[derive(Clone)]
pub struct Config {
    pub quick: bool,
    pub redis_server: String,
    pub redis_benchmark: String,
    pub module: PathBuf,
    /// The floor module (`bench/floor`): a lock's Redis calls and nothing
    /// else, loaded beside dlock in scenarios 1 and 2.
    pub floor_module: PathBuf,
    /// Core for redis-server (`taskset -c`), when pinning.
    pub server_cpu: Option<usize>,
    /// Core for the load generators, when pinning.
    pub client_cpu: Option<usize>,
    pub markdown: PathBuf,
    pub svg: PathBuf,
    pub only: Option<Vec<u32>>,
    pub cores: usize,
    /// The server this run measures, as the report names it ("" for the
    /// main server, Debian 12's Redis 7.0).
    pub server_label: String,
    /// Whether the hot-path goals are judged against the floor module (on
    /// Redis 7.0, where the module API's own cost is the ceiling) or
    /// against SET NX PX (on Redis 8 and Valkey 9), as issue 27 restates
    /// them.
    pub floor_goals: bool,
    /// Whether the pipeline-16 goals of scenarios 1 and 2 are judged
    /// against the floor module although `floor_goals` is off: on Redis 8,
    /// as issue 39 restates them (`RedisModule_ModuleTypeSetValue` pays a
    /// `removeExpire` that `SET ... PX` does not).
    pub floor_goal_at_16: bool,
}

/// A module's path: `$var` if set, else `default` under the work tree; an
/// error naming `build` (the command that makes it) when it is missing.
fn module_path(root: &Path, var: &str, default: &str, build: &str) -> Res<PathBuf> {
    let path = match std::env::var(var) {
        Ok(path) => PathBuf::from(path),
        Err(_) => root.join(default),
    };
    if !path.exists() {
        bail!("{} is missing: run {build} first", path.display());
    }
    Ok(path)
}

impl Config {
    fn from_args() -> Res<Config> {
        let root = repo_root();
        let env_quick = std::env::var("QUICK")
            .map(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
            .unwrap_or(false);
        let mut quick = env_quick;
        let mut out = None;
        let mut svg = None;
        let mut only = None;
        let mut pin = true;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => quick = true,
                "--full" => quick = false,
                "--no-pin" => pin = false,
                "--out" => out = Some(PathBuf::from(args.next().ok_or("--out needs a path")?)),
                "--svg" => svg = Some(PathBuf::from(args.next().ok_or("--svg needs a path")?)),
                "--only" => {
                    let list = args.next().ok_or("--only needs a list like 1,3")?;
                    let numbers: Result<Vec<u32>, _> =
                        list.split(',').map(|n| n.trim().parse::<u32>()).collect();
                    only = Some(numbers.map_err(|_| format!("bad --only list: {list}"))?);
                }
                "-h" | "--help" => {
                    println!(
                        "usage: dlock-bench [--quick] [--only 1,3] [--out FILE] [--svg FILE] [--no-pin]"
                    );
                    std::process::exit(0);
                }
                other => bail!("unknown argument {other:?} (try --help)"),
            }
        }
        let temp = std::env::temp_dir();
        let markdown = out.unwrap_or_else(|| {
            if quick {
                temp.join("dlock-benchmarks-quick.md")
            } else {
                root.join("docs/benchmarks.md")
            }
        });
        let svg = svg.unwrap_or_else(|| {
            if quick {
                temp.join("dlock-benchmarks-contention-quick.svg")
            } else {
                root.join("docs/benchmarks-contention.svg")
            }
        });
        let module = module_path(
            &root,
            "DLOCK_MODULE",
            "target/release/libdlock.so",
            "`cargo build --release` (or `make build`)",
        )?;
        let floor_module = module_path(
            &root,
            "DLOCK_FLOOR_MODULE",
            "target/release/libdlock_floor.so",
            "`cargo build --release -p dlock-floor` (or `make bench`)",
        )?;
        let cores = count_cores();
        let (server_cpu, client_cpu) = if pin && cores >= 2 {
            (Some(0), Some(1))
        } else {
            (None, None)
        };
        Ok(Config {
            quick,
            redis_server: std::env::var("DLOCK_SERVER").unwrap_or_else(|_| "redis-server".into()),
            redis_benchmark: std::env::var("DLOCK_BENCHMARK")
                .unwrap_or_else(|_| "redis-benchmark".into()),
            module,
            floor_module,
            server_cpu,
            client_cpu,
            markdown,
            svg,
            only,
            cores,
            server_label: String::new(),
            floor_goals: true,
            floor_goal_at_16: false,
        })
    }

    /// The extra server arguments that load the floor module beside dlock.
    pub fn floor_args(&self) -> [String; 2] {
        [
            "--loadmodule".to_string(),
            self.floor_module.display().to_string(),
        ]
    }

    fn wants(&self, scenario: u32) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.contains(&scenario))
    }

    /// `what` tagged with the server it was measured on, for every server
    /// but the main one.
    pub fn tag(&self, what: &str) -> String {
        if self.server_label.is_empty() {
            what.to_string()
        } else {
            format!("[{}] {what}", self.server_label)
        }
    }

    /// The same configuration on another server (`--only`'s list kept).
    fn on_server(&self, label: &str, server: String) -> Config {
        Config {
            redis_server: server,
            server_label: label.to_string(),
            floor_goals: false,
            floor_goal_at_16: label.starts_with("Redis 8"),
            ..self.clone()
        }
    }

    /// Picks the quick or the full value.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// The repository root: the bench package's parent.
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn count_cores() -> usize {
    let listed = std::fs::read_to_string("/proc/cpuinfo")
        .map(|text| {
            text.lines()
                .filter(|line| line.starts_with("processor"))
                .count()
        })
        .unwrap_or(0);
    if listed > 0 {
        listed
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Today's UTC date and time, from the system clock.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// The checked-out commit (read-only `git rev-parse`).
fn git_commit() -> String {
    let root = repo_root().display().to_string();
    let commit = command_output("git", &["-C", &root, "rev-parse", "--short", "HEAD"]);
    if commit.is_empty() {
        "unknown".into()
    } else {
        format!("{commit} (plus any uncommitted changes in the work tree)")
    }
}

/// The first three fields of /proc/loadavg.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn run() -> Res<()> {
    let config = Config::from_args()?;
    let started = Instant::now();
    let load_at_start = load_average();
    let files = sys::raise_nofile(20_000);
    if let Some(cpu) = config.client_cpu {
        sys::pin_to_cpu(cpu).map_err(|e| format!("cannot pin the bench to core {cpu}: {e}"))?;
    }
    println!(
        "dlock-bench: {} run, module {}, open-file limit {files}, {}",
        if config.quick { "quick" } else { "full" },
        config.module.display(),
        match (config.server_cpu, config.client_cpu) {
            (Some(s), Some(c)) => format!("redis-server on core {s}, load on core {c}"),
            _ => "not pinned".to_string(),
        }
    );

    let mut sections: Vec<Section> = Vec::new();
    let mut server_command = String::new();
    let mut svg_series = None;
    let step = |name: &str| {
        println!(
            "[{:>5.1} s] scenario {name}",
            started.elapsed().as_secs_f64()
        )
    };
    if config.wants(1) {
        step("1: uncontended acquire throughput");
        let (section, command) = scenarios::throughput::run(&config)?;
        server_command = command;
        sections.push(section);
    }
    if config.wants(2) {
        step("2: acquire + release pairs");
        sections.push(scenarios::pairs::run(&config)?);
    }
    if config.wants(3) || config.wants(7) {
        step("3: contention on one key");
        let outcome = scenarios::contention::run(&config)?;
        if config.wants(3) {
            sections.push(outcome.section);
        }
        svg_series = Some((outcome.series, outcome.subtitle));
        if config.wants(7) {
            sections.push(outcome.fairness);
        }
    }
    if config.wants(4) {
        step("4: queue-length scaling");
        sections.push(scenarios::queue::run(&config)?);
    }
    if config.wants(5) {
        step("5: lease-expiry hand-off delay");
        sections.push(scenarios::expiry::run(&config)?);
    }
    if config.wants(6) {
        step("6: memory per held lock");
        sections.push(scenarios::memory::run(&config)?);
    }
    if config.wants(8) {
        step("8: module tax");
        sections.push(scenarios::tax::run(&config)?);
    }
    if config.wants(9) || config.wants(10) {
        step("9, 10: read-write lock and semaphore (shared holds)");
        sections.extend(scenarios::shared::run(
            &config,
            config.wants(9),
            config.wants(10),
        )?);
    }
    if config.wants(11) {
        step("11: shared release cost against the number of holders");
        sections.push(scenarios::shared_release::run(&config)?);
    }
    if config.wants(12) {
        step("12: count-down latch");
        sections.push(scenarios::latch::run(&config)?);
    }
    if config.wants(13) {
        step("13: atomic multi-key acquire");
        sections.push(scenarios::multikey::run(&config)?);
    }
    if config.wants(14) {
        step("14: instructions per command (callgrind)");
        sections.push(scenarios::instructions::run(&config)?);
    }
    // Scenarios 1, 2 and 8 again on the newer servers dlock is tested on
    // (issue 27): `make bench` passes their paths (scripts/fetch-redis8.sh,
    // scripts/fetch-valkey.sh).
    for (label, var) in [
        ("Redis 8.0", "DLOCK_BENCH_REDIS8"),
        ("Valkey 9", "DLOCK_BENCH_VALKEY"),
    ] {
        let Ok(path) = std::env::var(var) else {
            continue;
        };
        let other = config.on_server(label, path);
        let retitle = |mut section: Section| {
            section.title = format!("{} (on {label})", section.title);
            section
        };
        if other.wants(1) {
            step(&format!("1 on {label}: uncontended acquire throughput"));
            sections.push(retitle(scenarios::throughput::run(&other)?.0));
        }
        if other.wants(2) {
            step(&format!("2 on {label}: acquire + release pairs"));
            sections.push(retitle(scenarios::pairs::run(&other)?));
        }
        if other.wants(8) {
            step(&format!("8 on {label}: module tax"));
            sections.push(retitle(scenarios::tax::run(&other)?));
        }
    }
    if config.wants(16) {
        step("16: weighted semaphore");
        sections.push(scenarios::weighted::run(&config)?);
    }
    if config.wants(17) {
        step("17: leader change");
        sections.push(scenarios::leader::run(&config)?);
    }
    // Scenario 15 is a tool for work on the module: run when named, or when
    // `make bench BASELINE=1` gives the base commit's build
    // (scripts/baseline-module.sh) to measure this branch's cost against.
    let named_15 = config.only.as_ref().is_some_and(|only| only.contains(&15));
    let baseline_given = std::env::var_os("DLOCK_MODULE_B").is_some() && config.only.is_none();
    if named_15 || baseline_given {
        step("15: this build of the module against another (DLOCK_MODULE_B)");
        sections.push(scenarios::builds::run(&config)?);
    }
    sections.sort_by_key(|section| section.number);
    let elapsed = started.elapsed().as_secs_f64();

    if server_command.is_empty() {
        server_command = server::Server::start(&config, &[])?.command_line.clone();
    }
    let svg_name = match &svg_series {
        Some((series, subtitle)) => {
            write_file(&config.svg, &report::contention_svg(series, subtitle))?;
            let relative = config.markdown.parent().and_then(|dir| {
                config
                    .svg
                    .strip_prefix(dir)
                    .ok()
                    .map(|p| p.display().to_string())
            });
            Some(relative.unwrap_or_else(|| config.svg.display().to_string()))
        }
        None => None,
    };
    let invocation = {
        let mut words = vec!["target/release/dlock-bench".to_string()];
        words.extend(std::env::args().skip(1).map(|a| server::shell_quote(&a)));
        let mut line = words.join(" ");
        if config.quick && !line.contains("--quick") {
            line = format!("QUICK=1 {line}");
        }
        format!(
            "make bench{}   # builds the module and the bench, then runs:\n{line}",
            if config.quick { " QUICK=1" } else { "" }
        )
    };
    let info = RunInfo {
        cores: config.cores,
        cpu_model: cpu_model(),
        redis_version: command_output(&config.redis_server, &["--version"]),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| "unknown".into()),
        date: utc_now(),
        commit: git_commit(),
        mode: if config.quick {
            "quick (QUICK=1: short runs, noisy figures)".into()
        } else {
            "full".into()
        },
        elapsed_s: elapsed,
        pinning: match (config.server_cpu, config.client_cpu) {
            (Some(s), Some(c)) => format!(
                "redis-server on core {s} (`taskset -c {s}`), every load generator (this bench's threads, redis-benchmark) on core {c}"
            ),
            _ => "none (fewer than 2 cores, or --no-pin)".into(),
        },
        load: format!(
            "{load_at_start} at the start, {} at the end (other work on the machine adds noise; \
             the interleaved ratios absorb most of it)",
            load_average()
        ),
        invocation,
        server_command,
    };
    print!("{}", report::text(&sections));
    write_file(
        &config.markdown,
        &report::markdown(&info, &sections, svg_name.as_deref()),
    )?;
    println!(
        "\nreport written to {} ({:.1} s)",
        config.markdown.display(),
        elapsed
    );
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Res<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

fn main() {
    if let Err(error) = run() {
        eprintln!("dlock-bench: error: {error}");
        std::process::exit(1);
    }
}
