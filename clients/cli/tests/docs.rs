//! Runs every shell example of docs/cli.md and of README.md's "From the
//! shell" section against a fresh server each, with the built `dlock`.
//!
//! # The convention the documents follow
//!
//! * A ```` ```sh ```` block is run with `bash -e -o pipefail` in a scratch
//!   directory (also `$HOME`), with `DLOCK_URL` set to the block's server
//!   and the built `dlock` first on `PATH`. It must exit 0 within 20 s.
//! * A ```` ```crontab ```` block: each line with five time fields is run
//!   as cron would (`sh -c` on the rest of the line); `NAME=value` lines
//!   are cron's own settings and are skipped (the test sets `DLOCK_URL`).
//! * A ```` ```ini ```` block is a systemd unit: its `ExecStart` (`%H` the
//!   host name) is started, must bring its program up (the stub logs it),
//!   then gets SIGTERM, as `systemctl stop` sends, and must end with a
//!   status its `SuccessExitStatus` (or 0) accepts.
//! * Commands the examples call that are not `dlock`, the shell's own or
//!   coreutils: `./NAME.sh` and `/usr/local/bin/NAME` are stubs the test
//!   writes, which log their name and arguments and exit 0 (`STUB_SLEEP`
//!   makes them run that long first: a worker); `/usr/local/bin/dlock` is
//!   the built binary.
//! * A marker on the line before a fence, `<!-- cli-test: WORDS -->`:
//!   `output` (the next ```` ```text ```` block is the block's exact stdout,
//!   blanks collapsed, `<name>` matching any text), `background` (the
//!   block runs until it prints a line, then gets SIGTERM and must exit 0).

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Server;
use support::*;

#[derive(Debug)]
struct Block {
    file: &'static str,
    line: usize,
    lang: String,
    text: String,
    output: Option<String>,
    background: bool,
}

fn blocks(file: &'static str, section: Option<&str>) -> Vec<Block> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join(file)).expect("read the document");
    let mut lines: Vec<&str> = text.lines().collect();
    let mut offset = 0;
    if let Some(section) = section {
        let start = lines
            .iter()
            .position(|l| *l == section)
            .unwrap_or_else(|| panic!("{file} has no section {section}"));
        let end = lines[start + 1..]
            .iter()
            .position(|l| l.starts_with("## "))
            .map_or(lines.len(), |e| start + 1 + e);
        lines = lines[start..end].to_vec();
        offset = start;
    }
    let mut found: Vec<Block> = Vec::new();
    let mut i = 0;
    let mut want_output_for: Option<usize> = None;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let marker = if i > 0 { lines[i - 1] } else { "" };
        let words: Vec<&str> = marker
            .strip_prefix("<!-- cli-test:")
            .and_then(|m| m.strip_suffix("-->"))
            .map(|m| m.split_whitespace().collect())
            .unwrap_or_default();
        let end = lines[i + 1..]
            .iter()
            .position(|l| l.starts_with("```"))
            .map(|e| i + 1 + e)
            .unwrap_or_else(|| panic!("{file}:{}: an unclosed block", offset + i + 1));
        let body = lines[i + 1..end].join("\n");
        match lang {
            "sh" | "crontab" | "ini" => {
                found.push(Block {
                    file,
                    line: offset + i + 1,
                    lang: lang.to_string(),
                    text: body,
                    output: None,
                    background: words.contains(&"background"),
                });
                want_output_for = words.contains(&"output").then(|| found.len() - 1);
            }
            "text" => {
                if let Some(at) = want_output_for.take() {
                    found[at].output = Some(body);
                }
            }
            _ => {}
        }
        i = end + 1;
    }
    for block in &found {
        assert!(
            !block.text.contains("```"),
            "{}:{}: a block inside a block",
            block.file,
            block.line
        );
    }
    found
}

/// Writes a stub for every `./NAME.sh` and `/usr/local/bin/NAME` of the
/// block, and maps `/usr/local/bin/dlock` to the built binary; returns the
/// block with the absolute paths rewritten into the scratch directory.
fn with_stubs(scratch: &Scratch, text: &str) -> String {
    let bin = scratch.path("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let mut rewritten = text.replace("/usr/local/bin/dlock", DLOCK);
    let mut names = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == '=') {
        if let Some(name) = word.strip_prefix("/usr/local/bin/") {
            if name != "dlock" {
                names.push((word.to_string(), name.to_string(), true));
            }
        } else if word.starts_with("./") && word.ends_with(".sh") {
            names.push((word.to_string(), word[2..].to_string(), false));
        }
    }
    for (word, name, absolute) in names {
        let path = if absolute {
            bin.join(&name)
        } else {
            scratch.path(&name)
        };
        let stub = format!(
            "#!/bin/sh\necho \"{name} $*\" >> \"$STUB_LOG\"\necho \"{name} ran\"\n\
             if [ -n \"$STUB_SLEEP\" ]; then exec sleep \"$STUB_SLEEP\"; fi\n"
        );
        std::fs::write(&path, stub).expect("write a stub");
        let status = Command::new("chmod")
            .arg("+x")
            .arg(&path)
            .status()
            .expect("chmod");
        assert!(status.success());
        if absolute {
            rewritten = rewritten.replace(&word, &path.to_string_lossy());
        }
    }
    rewritten
}

fn shell(server: &Server, scratch: &Scratch) -> Command {
    let dlock_dir = Path::new(DLOCK).parent().expect("the binary's directory");
    let path = format!(
        "{}:{}:{}",
        dlock_dir.display(),
        scratch.path("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .current_dir(&scratch.0)
        .env("DLOCK_URL", url_of(server))
        .env_remove("REDISCLI_AUTH")
        .env("HOME", &scratch.0)
        .env("PATH", path)
        .env("STUB_LOG", scratch.path("stubs.log"))
        .stdin(Stdio::null());
    command
}

/// Whether `actual` matches `expected`, blanks collapsed, `<name>`
/// matching any text.
fn matches(expected: &str, actual: &str) -> bool {
    let squash = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    let (expected, actual) = (squash(expected), squash(actual));
    expected.len() == actual.len()
        && expected
            .iter()
            .zip(&actual)
            .all(|(e, a)| line_matches(e, a))
}

fn line_matches(expected: &str, actual: &str) -> bool {
    // The literal pieces between placeholders; each placeholder matches at
    // least one character.
    let mut pieces = Vec::new();
    let mut rest = expected;
    while let (Some(open), Some(close)) = (rest.find('<'), rest.find('>')) {
        if close < open {
            break;
        }
        pieces.push(&rest[..open]);
        rest = &rest[close + 1..];
    }
    pieces.push(rest);
    if pieces.len() == 1 {
        return expected == actual;
    }
    if !actual.starts_with(pieces[0]) {
        return false;
    }
    let mut at = pieces[0].len();
    for piece in &pieces[1..pieces.len() - 1] {
        let Some(found) = actual.get(at + 1..).and_then(|tail| tail.find(piece)) else {
            return false;
        };
        at += 1 + found + piece.len();
    }
    let last = pieces[pieces.len() - 1];
    actual.len() >= at + 1 + last.len() && actual.ends_with(last)
}

fn run_block(block: &Block) -> Result<(), String> {
    let server = Server::start();
    let scratch = Scratch::new();
    let text = with_stubs(&scratch, &block.text);
    match block.lang.as_str() {
        "sh" if block.background => {
            let mut child = shell(&server, &scratch)
                .args(["-c", &text])
                .stdout(std::fs::File::create(scratch.path("out")).expect("out"))
                .stderr(Stdio::inherit())
                .spawn()
                .expect("bash");
            let deadline = Instant::now() + Duration::from_secs(20);
            while scratch.read("out").is_empty() {
                if Instant::now() > deadline || child.try_wait().expect("try_wait").is_some() {
                    let _ = child.kill();
                    return Err("printed nothing while running".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // bash -c runs a single command in place (exec): the signal
            // reaches dlock itself.
            send_signal(child.id(), libc::SIGTERM);
            let status = wait_status(&mut child, Duration::from_secs(20));
            if status.code() != Some(0) {
                return Err(format!("ended with {status:?} after SIGTERM"));
            }
            Ok(())
        }
        "sh" => {
            let script = format!("set -e -o pipefail\n{text}");
            let out = output(shell(&server, &scratch).args(["-c", &script]));
            if !out.status.success() {
                return Err(format!(
                    "exited {:?}\nstdout: {}\nstderr: {}",
                    out.status,
                    stdout_of(&out),
                    stderr_of(&out)
                ));
            }
            if let Some(expected) = &block.output {
                if !matches(expected, &stdout_of(&out)) {
                    return Err(format!(
                        "printed:\n{}\nthe document says:\n{expected}",
                        stdout_of(&out)
                    ));
                }
            }
            Ok(())
        }
        "crontab" => {
            let mut ran = 0;
            for line in text.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let fields: Vec<&str> = line.splitn(6, char::is_whitespace).collect();
                if fields[0].contains('=') {
                    continue; // a setting of cron's, as DLOCK_URL=...
                }
                assert_eq!(fields.len(), 6, "a crontab line: {line}");
                let out = output(shell(&server, &scratch).args(["-c", fields[5]]));
                if !out.status.success() {
                    return Err(format!(
                        "'{}' exited {:?}: {}",
                        fields[5],
                        out.status,
                        stderr_of(&out)
                    ));
                }
                ran += 1;
            }
            if ran == 0 || scratch.read("stubs.log").lines().count() < ran {
                return Err("no job ran".into());
            }
            Ok(())
        }
        "ini" => {
            let exec = text
                .lines()
                .find_map(|l| l.strip_prefix("ExecStart="))
                .ok_or("a unit without ExecStart")?
                .replace("%H", "host-a");
            let accepted: Vec<i32> = text
                .lines()
                .filter_map(|l| l.strip_prefix("SuccessExitStatus="))
                .flat_map(|codes| {
                    codes
                        .split_whitespace()
                        .map(|c| c.parse().expect("a status"))
                })
                .chain([0])
                .collect();
            let mut child = shell(&server, &scratch)
                .env("STUB_SLEEP", "600")
                .args(["-c", &format!("exec {exec}")])
                .stdout(Stdio::null())
                .spawn()
                .expect("ExecStart");
            let deadline = Instant::now() + Duration::from_secs(20);
            while scratch.read("stubs.log").is_empty() {
                if Instant::now() > deadline || child.try_wait().expect("try_wait").is_some() {
                    let _ = child.kill();
                    return Err("the unit's program never started".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // systemctl stop: SIGTERM to every process of the unit.
            send_signal(child.id(), libc::SIGTERM);
            let status = wait_status(&mut child, Duration::from_secs(20));
            match status.code() {
                Some(code) if accepted.contains(&code) => Ok(()),
                _ => Err(format!("stopped with {status:?}, accepted {accepted:?}")),
            }
        }
        other => Err(format!("unknown block type {other}")),
    }
}

fn check(blocks: Vec<Block>, at_least: usize) {
    assert!(
        blocks.len() >= at_least,
        "found only {} blocks",
        blocks.len()
    );
    // The blocks run in parallel: each has its own server.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = blocks
            .iter()
            .map(|block| scope.spawn(move || (block, run_block(block))))
            .collect();
        handles
            .into_iter()
            .filter_map(|h| match h.join().expect("a block's thread") {
                (_, Ok(())) => None,
                (block, Err(why)) => Some(format!(
                    "{}:{} ({}):\n{}\n--> {why}",
                    block.file, block.line, block.lang, block.text
                )),
            })
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_shell_example_of_docs_cli_md_runs() {
    check(blocks("docs/cli.md", None), 12);
}

#[test]
fn every_example_of_the_readme_from_the_shell_section_runs() {
    let found = blocks("README.md", Some("## From the shell"));
    let kinds: Vec<&str> = found.iter().map(|b| b.lang.as_str()).collect();
    assert_eq!(
        kinds,
        ["crontab", "sh", "ini"],
        "a cron job, a deploy step, a systemd unit"
    );
    check(found, 3);
}

#[test]
fn the_output_matcher_takes_placeholders_and_collapses_blanks() {
    assert!(matches("a <x> c", "a bbb c"));
    assert!(matches("key  <v>", "key v"));
    assert!(matches("<token>", "17"));
    assert!(!matches("a <x> c", "a bbb d"));
    assert!(!matches("a <x>", "a"));
    assert!(!matches("one", "one\ntwo"));
    assert!(matches("{\"term\":<t>}", "{\"term\":12}"));
}
