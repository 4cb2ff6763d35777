//! What a scenario reports, and how the report is printed, written as
//! Markdown and drawn as SVG.

use std::fmt::Write as _;

/// One table of figures.
pub struct Table {
    pub caption: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(caption: &str, headers: &[&str]) -> Table {
        Table {
            caption: caption.to_string(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

const NOT_RUN: &str = "not available";
/// The goal of a figure shown beside the targets as their context.
pub const NO_GOAL: &str = "none (context)";

/// A target of the brief and whether this run met it.
pub struct Target {
    pub what: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
}

impl Target {
    /// `measured >= goal` (ratios).
    pub fn at_least(what: &str, measured: f64, goal: f64) -> Target {
        Target {
            what: what.to_string(),
            measured: crate::stats::times(measured),
            goal: format!(">= {}", crate::stats::times(goal)),
            met: measured.is_finite() && measured >= goal,
        }
    }

    /// `measured <= goal` (ratios).
    pub fn at_most(what: &str, measured: f64, goal: f64) -> Target {
        Target {
            what: what.to_string(),
            measured: crate::stats::times(measured),
            goal: format!("<= {}", crate::stats::times(goal)),
            met: measured.is_finite() && measured <= goal,
        }
    }

    /// A target of a scenario that could not run (its commands are missing).
    pub fn not_run(what: &str, goal: &str) -> Target {
        Target {
            what: what.to_string(),
            measured: NOT_RUN.into(),
            goal: goal.to_string(),
            met: false,
        }
    }

    /// A ratio with no goal of its own, listed for what it says about the
    /// targets beside it (the floor module's ratios, for one).
    pub fn context(what: &str, measured: f64) -> Target {
        Target {
            what: what.to_string(),
            measured: crate::stats::times(measured),
            goal: NO_GOAL.into(),
            met: true,
        }
    }

    pub fn verdict(&self) -> &'static str {
        if self.goal == NO_GOAL {
            "context"
        } else if self.measured == NOT_RUN {
            "not run"
        } else if self.met {
            "met"
        } else {
            "MISSED"
        }
    }
}

/// The report of one scenario.
pub struct Section {
    pub number: u32,
    pub title: String,
    /// Markdown: what is measured and how.
    pub about: String,
    pub tables: Vec<Table>,
    /// Exact command lines (shell), `PORT` standing for the server's port.
    pub commands: Vec<String>,
    pub targets: Vec<Target>,
    /// Markdown bullet points after the tables.
    pub notes: Vec<String>,
}

impl Section {
    pub fn new(number: u32, title: &str) -> Section {
        Section {
            number,
            title: title.to_string(),
            about: String::new(),
            tables: Vec::new(),
            commands: Vec::new(),
            targets: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// Facts about the machine and the run, for the report's head.
pub struct RunInfo {
    pub cores: usize,
    pub cpu_model: String,
    pub redis_version: String,
    pub kernel: String,
    pub date: String,
    pub commit: String,
    pub mode: String,
    pub elapsed_s: f64,
    pub pinning: String,
    /// /proc/loadavg at the start and at the end of the run.
    pub load: String,
    pub invocation: String,
    pub server_command: String,
}

fn text_table(out: &mut String, table: &Table) {
    let columns = table.headers.len();
    let mut widths: Vec<usize> = table.headers.iter().map(|h| h.chars().count()).collect();
    for row in &table.rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: &[String]| {
        let mut text = String::new();
        for (i, width) in widths.iter().enumerate() {
            let cell = cells.get(i).map(String::as_str).unwrap_or("");
            let pad = width - cell.chars().count();
            if i == 0 {
                let _ = write!(text, "  {cell}{}", " ".repeat(pad));
            } else {
                let _ = write!(text, "  {}{cell}", " ".repeat(pad));
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    if !table.caption.is_empty() {
        let _ = writeln!(out, "  {}", table.caption);
    }
    line(out, &table.headers);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(out, &rule);
    for row in &table.rows {
        line(out, row);
    }
}

/// The report as plain text for the terminal.
pub fn text(sections: &[Section]) -> String {
    let mut out = String::new();
    for section in sections {
        let _ = writeln!(out, "\n== {}. {} ==", section.number, section.title);
        if section.tables.is_empty() && !section.about.is_empty() {
            let _ = writeln!(out, "  {}", section.about.replace("**", ""));
        }
        for table in &section.tables {
            text_table(&mut out, table);
            out.push('\n');
        }
    }
    let mut targets = Table::new("", &["#", "target", "measured", "goal", "result"]);
    for section in sections {
        for target in &section.targets {
            targets.row(vec![
                section.number.to_string(),
                target.what.clone(),
                target.measured.clone(),
                target.goal.clone(),
                target.verdict().to_string(),
            ]);
        }
    }
    let _ = writeln!(out, "\n== Targets ==");
    text_table(&mut out, &targets);
    out
}

/// A cell that holds a figure (a number, a ratio, a duration).
fn is_figure(cell: &str) -> bool {
    cell.starts_with(|c: char| c.is_ascii_digit() || c == '-')
        || cell.starts_with("n/a")
        || cell.starts_with("inf")
}

fn md_escape(cell: &str) -> String {
    cell.replace('|', "\\|")
}

fn md_table(out: &mut String, table: &Table) {
    if !table.caption.is_empty() {
        let _ = writeln!(out, "{}\n", table.caption);
    }
    let headers: Vec<String> = table.headers.iter().map(|h| md_escape(h)).collect();
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    // Columns of figures are right-aligned, columns of words left-aligned.
    let rule: Vec<&str> = (0..table.headers.len())
        .map(|i| {
            let numeric = !table.rows.is_empty()
                && table
                    .rows
                    .iter()
                    .all(|row| row.get(i).is_some_and(|cell| is_figure(cell)));
            if numeric {
                "---:"
            } else {
                "---"
            }
        })
        .collect();
    let _ = writeln!(out, "| {} |", rule.join(" | "));
    for row in &table.rows {
        let cells: Vec<String> = row.iter().map(|c| md_escape(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

/// The whole report as Markdown (docs/benchmarks.md).
pub fn markdown(info: &RunInfo, sections: &[Section], svg_name: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# dlock benchmarks\n");
    let _ = writeln!(
        out,
        "This file is written by `make bench` (the `dlock-bench` package in \
         [`bench/`](../bench/)); do not edit it by hand, run the bench again. \
         Every figure is given in absolute terms and as a ratio against a \
         reference design measured in the same run: the designs of a scenario \
         run interleaved (A, B, C, A, B, C, ..., the starting design rotating) \
         and each figure is the median of its repetitions. The ratios are what \
         to compare across machines; the absolute figures depend on this one.\n"
    );
    let _ = writeln!(out, "## Machine and run\n");
    let mut facts = Table::new("", &["", ""]);
    facts.headers = vec!["what".into(), "value".into()];
    facts.row(vec![
        "machine".into(),
        format!("{} cores, {}", info.cores, info.cpu_model),
    ]);
    facts.row(vec!["kernel".into(), info.kernel.clone()]);
    facts.row(vec!["Redis".into(), info.redis_version.clone()]);
    facts.row(vec!["dlock commit".into(), info.commit.clone()]);
    facts.row(vec!["date".into(), info.date.clone()]);
    facts.row(vec![
        "run".into(),
        format!("{}, {:.0} s", info.mode, info.elapsed_s),
    ]);
    facts.row(vec!["pinning".into(), info.pinning.clone()]);
    facts.row(vec![
        "load average (1, 5, 15 min)".into(),
        info.load.clone(),
    ]);
    md_table_left(&mut out, &facts);
    let _ = writeln!(out, "The bench was run as:\n");
    let _ = writeln!(out, "```sh\n{}\n```\n", info.invocation);
    let _ = writeln!(
        out,
        "and every redis-server it started was (`PORT` is a free port, `DIR` a \
         fresh temporary directory; scenario 4 adds `--maxclients 20000`; scenarios \
         2 and 8 also start the same server without `--loadmodule`, the plain-Redis \
         reference):\n"
    );
    let _ = writeln!(out, "```sh\n{}\n```\n", info.server_command);

    let _ = writeln!(out, "## Targets\n");
    let mut targets = Table::new("", &["scenario", "target", "measured", "goal", "result"]);
    for section in sections {
        for target in &section.targets {
            let verdict = match target.verdict() {
                "MISSED" => "**MISSED**",
                other => other,
            };
            targets.row(vec![
                format!("[{}](#s{})", section.number, section.number),
                target.what.clone(),
                target.measured.clone(),
                target.goal.clone(),
                verdict.to_string(),
            ]);
        }
    }
    md_table_left(&mut out, &targets);

    for section in sections {
        let _ = writeln!(
            out,
            "<a id=\"s{}\"></a>\n## {}. {}\n",
            section.number, section.number, section.title
        );
        if !section.about.is_empty() {
            let _ = writeln!(out, "{}\n", section.about.trim_end());
        }
        for table in &section.tables {
            md_table(&mut out, table);
        }
        if section.number == 3 {
            if let Some(svg) = svg_name {
                let _ = writeln!(
                    out,
                    "![Hand-offs per second against contending clients, log scale]({svg})\n"
                );
            }
        }
        for note in &section.notes {
            let _ = writeln!(out, "* {note}");
        }
        if !section.notes.is_empty() {
            out.push('\n');
        }
        if !section.commands.is_empty() {
            let _ = writeln!(out, "Commands:\n\n```sh");
            for command in &section.commands {
                let _ = writeln!(out, "{command}");
            }
            let _ = writeln!(out, "```\n");
        }
    }
    let _ = writeln!(out, "## Running it\n");
    let _ = writeln!(
        out,
        "```sh\nmake bench          # full run (< 10 minutes), rewrites this file and the SVG\n\
         QUICK=1 make bench  # every scenario briefly (< 60 s), writes to a temporary file\n\
         make test           # the test suite, then the quick bench\n```\n"
    );
    let _ = writeln!(
        out,
        "A missed target is reported, never an error: the bench fails only when \
         something does not work (a server that does not start, a wrong reply, \
         two holders at once). A scenario whose commands the server does not have \
         is reported as not available and its goals as not run."
    );
    if crate::repo_root()
        .join("clients/rust/benches/client.rs")
        .exists()
    {
        let _ = writeln!(
            out,
            "\nThe Rust client's scenarios (acquire + release through `dlock-client` \
             against the raw commands, and the renewal cost of 10,000 guards) are \
             measured by `clients/rust/benches/client.rs`, which `make bench` runs next, \
             and reported in [benchmarks-client.md](benchmarks-client.md)."
        );
    }
    // The other clients' benches (each against its ecosystem's lock
    // libraries on one server in one run), run by `make bench` after this.
    for (file, what) in [
        (
            "benchmarks-java.md",
            "The Java client against Redisson (`make java-bench`)",
        ),
        (
            "benchmarks-go.md",
            "The Go client against redsync and bsm/redislock (`make go-bench`)",
        ),
        (
            "benchmarks-node.md",
            "The TypeScript client against redlock and redis-semaphore (`make node-bench`)",
        ),
    ] {
        if crate::repo_root().join("docs").join(file).exists() {
            let _ = writeln!(out, "\n{what}: [{file}]({file}).");
        }
    }
    out
}

fn md_table_left(out: &mut String, table: &Table) {
    let headers: Vec<String> = table.headers.iter().map(|h| md_escape(h)).collect();
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let rule: Vec<&str> = table.headers.iter().map(|_| "---").collect();
    let _ = writeln!(out, "| {} |", rule.join(" | "));
    for row in &table.rows {
        let cells: Vec<String> = row.iter().map(|c| md_escape(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
}

/// One line of the contention chart: a design and its (clients, hand-offs/s).
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub points: Vec<(u32, f64)>,
}

/// A hand-written SVG line chart: hand-offs/s against clients, both axes log.
pub fn contention_svg(series: &[Series], subtitle: &str) -> String {
    let (width, height) = (720.0, 440.0);
    let (left, right, top, bottom) = (80.0, 200.0, 50.0, 60.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let clients: Vec<u32> = {
        let mut all: Vec<u32> = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let values: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| *v > 0.0)
        .collect();
    let min_v = values
        .iter()
        .cloned()
        .fold(f64::INFINITY, f64::min)
        .max(1e-3);
    let max_v = values.iter().cloned().fold(0.0, f64::max).max(min_v * 10.0);
    let lo = 10f64.powf(min_v.log10().floor());
    let hi = 10f64.powf(max_v.log10().ceil());
    let (cmin, cmax) = (
        *clients.first().unwrap_or(&1) as f64,
        *clients.last().unwrap_or(&2) as f64,
    );
    let x = |c: f64| {
        if cmax <= cmin {
            left + plot_w / 2.0
        } else {
            left + (c.log2() - cmin.log2()) / (cmax.log2() - cmin.log2()) * plot_w
        }
    };
    let y = |v: f64| {
        top + plot_h - (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()) * plot_h
    };
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        svg,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"white\"/>"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Lock hand-offs per second on one key (log scale)</text>",
        left
    );
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"38\" fill=\"#555\">{}</text>",
        left,
        xml_escape(subtitle)
    );
    // Horizontal grid: one line per decade.
    let mut decade = lo;
    while decade <= hi * 1.0001 {
        let yy = y(decade);
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>",
            left + plot_w
        );
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            yy + 4.0,
            crate::stats::thousands(decade)
        );
        decade *= 10.0;
    }
    for c in &clients {
        let xx = x(*c as f64);
        let _ = writeln!(
            svg,
            "<line x1=\"{xx:.1}\" y1=\"{top}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>",
            top + plot_h
        );
        let _ = writeln!(
            svg,
            "<text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{c}</text>",
            top + plot_h + 18.0
        );
    }
    let _ = writeln!(
        svg,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#333\"/>"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">contending clients</text>",
        left + plot_w / 2.0,
        height - 18.0
    );
    let _ = writeln!(
        svg,
        "<text x=\"18\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {:.1})\">hand-offs per second</text>",
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    for (i, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|(c, v)| format!("{:.1},{:.1}", x(*c as f64), y(*v)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2.5\"/>",
            points.join(" "),
            s.color
        );
        for (c, v) in &s.points {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{}\"><title>{}: {} clients, {} hand-offs/s</title></circle>",
                x(*c as f64),
                y(*v),
                s.color,
                xml_escape(&s.name),
                c,
                crate::stats::thousands(*v)
            );
        }
        let ly = top + 10.0 + i as f64 * 22.0;
        let lx = left + plot_w + 16.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"2.5\"/>",
            lx + 24.0,
            s.color
        );
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            lx + 30.0,
            ly + 4.0,
            xml_escape(&s.name)
        );
    }
    let _ = writeln!(svg, "</svg>");
    svg
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
