//! The redis-cli sessions of README.md and docs/commands.md, run against a
//! fresh server each and compared reply by reply with the document.
//!
//! # The convention the documents follow
//!
//! A **session block** is a fenced code block with at least one prompt line,
//! or one that a marker (below) names. Blocks with no prompt (grammar,
//! configuration files, shell commands) are prose, not run.
//!
//! Lines of a session block:
//!
//! * `127.0.0.1:6379> COMMAND args` or `> COMMAND args`: typed in the
//!   block's terminal (terminal `1` unless a marker says otherwise), split
//!   as redis-cli splits (quotes `"..."` with `\` escapes, `'...'`).
//! * `NAME> COMMAND args` (`NAME` a word such as `bob` or `2`): typed in
//!   terminal `NAME`, a connection of its own, opened on first use. This is
//!   how one block shows several clients.
//! * `$ redis-cli COMMAND args`: a redis-cli process: a connection of its
//!   own, closed after the reply (the harness waits until the server has
//!   seen the close).
//! * The lines after a command, up to the next prompt or directive, are its
//!   reply exactly as redis-cli 7 prints it in a terminal (`(integer) 1`,
//!   `"text"`, `(nil)`, `(error) ...`, numbered arrays, RESP3 `1# k => v`;
//!   `INFO` and `CLIENT LIST` raw). Blank lines are ignored.
//! * A command with **no reply lines** blocks: the harness sends it, waits
//!   until the server counts one more blocked client, and goes on. Its
//!   reply comes later, under `(NAME receives:)`.
//! * `(NAME receives:)`: the reply lines that follow are what terminal
//!   `NAME` prints next: the reply of its blocked command, or pub/sub
//!   messages after a `SUBSCRIBE`.
//! * `(after N ms)`: the harness waits N milliseconds (leases and
//!   reservations that must run out).
//!
//! A **marker** is an HTML comment on the line before the fence (invisible
//! when rendered), `<!-- session: WORDS -->`, with any of:
//!
//! * `continue`: the block continues the previous session of the file (same
//!   server, same terminals) instead of starting a fresh server. A session
//!   may so span several blocks with prose between them.
//! * `terminal=NAME`: plain prompts of this block are typed in terminal
//!   `NAME`. Reply lines before the block's first command are what `NAME`
//!   receives (the reply of the command it blocked on).
//! * `resp3`: the block's terminal speaks RESP3 (`redis-cli -3`).
//! * `skip REASON`: not run (output that cannot be reproduced, e.g.
//!   `MONITOR` of a replica); say why.
//!
//! # What must match
//!
//! Every line, with trailing spaces ignored, except values that change from
//! run to run, which match by pattern:
//!
//! * fencing tokens (integers of 13 digits or more) match any token, the
//!   same document token always the same actual one, in the same order
//!   (a larger token in the document is a larger one in the run);
//! * UUIDs match any UUID, consistently;
//! * durations: the value of a `pttl`, `waited-ms` or `expires-in-ms`
//!   field, and any `(integer)` reply of 4 to 12 digits (a pttl inside a
//!   `holders` entry, a `PTTL`), match within max(1000, 10%) of the
//!   document's; `-1` matches only `-1`;
//! * the value of a `client-id` field, and `CLIENT ID` replies, match any
//!   id, consistently;
//! * a number right after `time=` (the audit channel's messages) or
//!   `dlock_wait_ms_sum:` (`INFO dlock`'s sum of measured waits) matches
//!   any number.
//!
//! Where a document value is bound to an actual one, later commands that
//! type the document value (a generated owner, a client id) are sent with
//! the actual one.
//!
//! Each session must be self-contained: it starts from an empty server.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

// ---------------------------------------------------------------------------
// Parsing the documents.
// ---------------------------------------------------------------------------

#[derive(Debug)]
enum Step {
    /// A command typed in a terminal; `expected` None: it blocks.
    Command {
        terminal: String,
        args: Vec<Vec<u8>>,
        expected: Option<Vec<String>>,
        line: usize,
    },
    /// `$ redis-cli ...`: a connection of its own for one command.
    OneShot {
        args: Vec<Vec<u8>>,
        expected: Vec<String>,
        line: usize,
    },
    /// What a terminal prints next.
    Receive {
        terminal: String,
        expected: Vec<String>,
        line: usize,
    },
    Sleep(u64),
    /// The terminal speaks RESP3 from here on.
    Resp3(String),
}

#[derive(Debug)]
struct Session {
    file: &'static str,
    line: usize,
    steps: Vec<Step>,
}

#[derive(Default)]
struct Marker {
    cont: bool,
    skip: bool,
    terminal: Option<String>,
    resp3: bool,
}

fn parse_marker(line: &str) -> Option<Marker> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim()
        .strip_prefix("session:")?;
    let mut marker = Marker::default();
    for word in inner.split_whitespace() {
        if word == "continue" {
            marker.cont = true;
        } else if word == "skip" {
            marker.skip = true;
            break;
        } else if word == "resp3" {
            marker.resp3 = true;
        } else if let Some(name) = word.strip_prefix("terminal=") {
            marker.terminal = Some(name.to_string());
        } else {
            panic!("unknown word {word:?} in the session marker {line:?}");
        }
    }
    Some(marker)
}

/// A prompt line: (terminal, command text); terminal None for the plain one.
fn prompt(line: &str) -> Option<(Option<String>, &str)> {
    if let Some(command) = line.strip_prefix("> ") {
        return Some((None, command));
    }
    let (before, command) = line.split_once("> ")?;
    if before.starts_with("127.0.0.1:") && before[10..].bytes().all(|b| b.is_ascii_digit()) {
        return Some((None, command));
    }
    let is_name = !before.is_empty()
        && before.len() <= 16
        && before
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    is_name.then(|| (Some(before.to_string()), command))
}

/// `(NAME receives:)`
fn receives(line: &str) -> Option<String> {
    let name = line.trim().strip_prefix('(')?.strip_suffix(" receives:)")?;
    Some(name.to_string())
}

/// `(after N ms)`
fn after_ms(line: &str) -> Option<u64> {
    line.trim()
        .strip_prefix("(after ")?
        .strip_suffix(" ms)")?
        .parse()
        .ok()
}

/// Splits a command line as redis-cli does (sdssplitargs).
fn split_args(line: &str) -> Vec<Vec<u8>> {
    let bytes = line.as_bytes();
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() {
            return args;
        }
        let mut arg = Vec::new();
        match bytes[i] {
            b'"' => {
                i += 1;
                loop {
                    assert!(i < bytes.len(), "unbalanced quotes in {line:?}");
                    match bytes[i] {
                        b'\\' if i + 1 < bytes.len() => {
                            i += 1;
                            match bytes[i] {
                                b'n' => arg.push(b'\n'),
                                b'r' => arg.push(b'\r'),
                                b't' => arg.push(b'\t'),
                                b'x' if i + 2 < bytes.len() => {
                                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                                    arg.push(u8::from_str_radix(hex, 16).expect("\\xHH"));
                                    i += 2;
                                }
                                other => arg.push(other),
                            }
                        }
                        b'"' => {
                            i += 1;
                            break;
                        }
                        other => arg.push(other),
                    }
                    i += 1;
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    assert!(i < bytes.len(), "unbalanced quotes in {line:?}");
                    match bytes[i] {
                        b'\\' if bytes.get(i + 1) == Some(&b'\'') => {
                            arg.push(b'\'');
                            i += 1;
                        }
                        b'\'' => {
                            i += 1;
                            break;
                        }
                        other => arg.push(other),
                    }
                    i += 1;
                }
            }
            _ => {
                while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                    arg.push(bytes[i]);
                    i += 1;
                }
            }
        }
        args.push(arg);
    }
}

/// The session blocks of a markdown file, in order.
fn sessions(file: &'static str) -> Vec<Session> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let lines: Vec<&str> = text.lines().collect();
    let mut sessions: Vec<Session> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with("```") {
            i += 1;
            continue;
        }
        let start = i;
        let marker = (0..start)
            .rev()
            .map(|j| lines[j])
            .find(|l| !l.trim().is_empty())
            .and_then(parse_marker);
        let mut end = start + 1;
        while end < lines.len() && !lines[end].starts_with("```") {
            end += 1;
        }
        let body: Vec<(usize, &str)> = (start + 1..end).map(|j| (j + 1, lines[j])).collect();
        i = end + 1;
        let has_prompt = body.iter().any(|(_, l)| {
            prompt(l).is_some() || l.starts_with("$ redis-cli ") || receives(l).is_some()
        });
        let marker = match marker {
            Some(marker) => marker,
            None if has_prompt => Marker::default(),
            None => continue,
        };
        if marker.skip {
            continue;
        }
        let block_terminal = marker.terminal.clone().unwrap_or_else(|| "1".to_string());
        let mut steps = Vec::new();
        if marker.resp3 {
            steps.push(Step::Resp3(block_terminal.clone()));
        }
        // The step whose reply lines are being read.
        let mut open: Option<Step> = None;
        let close = |open: &mut Option<Step>, steps: &mut Vec<Step>| {
            if let Some(step) = open.take() {
                steps.push(step);
            }
        };
        for (line_no, line) in body {
            if let Some((terminal, command)) = prompt(line) {
                close(&mut open, &mut steps);
                open = Some(Step::Command {
                    terminal: terminal.unwrap_or_else(|| block_terminal.clone()),
                    args: split_args(command),
                    expected: None,
                    line: line_no,
                });
            } else if let Some(command) = line.strip_prefix("$ redis-cli ") {
                close(&mut open, &mut steps);
                open = Some(Step::OneShot {
                    args: split_args(command),
                    expected: Vec::new(),
                    line: line_no,
                });
            } else if let Some(terminal) = receives(line) {
                close(&mut open, &mut steps);
                open = Some(Step::Receive {
                    terminal,
                    expected: Vec::new(),
                    line: line_no,
                });
            } else if let Some(ms) = after_ms(line) {
                close(&mut open, &mut steps);
                steps.push(Step::Sleep(ms));
            } else if line.trim().is_empty() {
                continue;
            } else {
                let reply_line = line.trim_end().to_string();
                match open.as_mut() {
                    Some(Step::Command { expected, .. }) => {
                        expected.get_or_insert_with(Vec::new).push(reply_line)
                    }
                    Some(Step::OneShot { expected, .. }) | Some(Step::Receive { expected, .. }) => {
                        expected.push(reply_line)
                    }
                    _ => {
                        open = Some(Step::Receive {
                            terminal: block_terminal.clone(),
                            expected: vec![reply_line],
                            line: line_no,
                        })
                    }
                }
            }
        }
        close(&mut open, &mut steps);
        match sessions.last_mut() {
            Some(previous) if marker.cont => previous.steps.extend(steps),
            _ => {
                assert!(!marker.cont, "{file}:{}: nothing to continue", start + 1);
                sessions.push(Session {
                    file,
                    line: start + 1,
                    steps,
                })
            }
        }
    }
    sessions
}

// ---------------------------------------------------------------------------
// A RESP client that keeps replies as redis-cli sees them.
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
    Set(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Double(String),
    Bool(bool),
    Push(Vec<Reply>),
}

struct Terminal {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Terminal {
    fn open(port: u16) -> Terminal {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(PATIENCE))
            .expect("read timeout");
        Terminal {
            writer: stream.try_clone().expect("clone the stream"),
            reader: BufReader::new(stream),
        }
    }

    fn send(&mut self, args: &[Vec<u8>]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out).expect("send");
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .expect("a reply (the read timed out)");
        assert!(n > 0, "the server closed the connection");
        line.trim_end_matches("\r\n").to_string()
    }

    fn read(&mut self) -> Reply {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        let count = || rest.parse::<i64>().expect("a length");
        match kind {
            "+" => Reply::Status(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(count()),
            "_" => Reply::Nil,
            "," => Reply::Double(rest.to_string()),
            "#" => Reply::Bool(rest == "t"),
            "$" | "=" => {
                let len = count();
                if len < 0 {
                    return Reply::Nil;
                }
                let mut bytes = vec![0; len as usize + 2];
                std::io::Read::read_exact(&mut self.reader, &mut bytes).expect("bulk");
                bytes.truncate(len as usize);
                if kind == "=" {
                    bytes.drain(..4.min(bytes.len()));
                }
                Reply::Bulk(bytes)
            }
            "*" | "~" | ">" => {
                let len = count();
                if len < 0 {
                    return Reply::Nil;
                }
                let items = (0..len).map(|_| self.read()).collect();
                match kind {
                    "*" => Reply::Array(items),
                    "~" => Reply::Set(items),
                    _ => Reply::Push(items),
                }
            }
            "%" => Reply::Map((0..count()).map(|_| (self.read(), self.read())).collect()),
            other => panic!("unknown RESP type {other:?} in {line:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Printing replies as redis-cli 7 does in a terminal.
// ---------------------------------------------------------------------------

fn quoted(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

fn format_tty(reply: &Reply, prefix: &str) -> String {
    match reply {
        Reply::Status(text) => format!("{text}\n"),
        Reply::Error(text) => format!("(error) {text}\n"),
        Reply::Int(n) => format!("(integer) {n}\n"),
        Reply::Bulk(bytes) => format!("{}\n", quoted(bytes)),
        Reply::Nil => "(nil)\n".to_string(),
        Reply::Double(text) => format!("(double) {text}\n"),
        Reply::Bool(b) => format!("({b})\n"),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) if items.is_empty() => {
            "(empty array)\n".to_string()
        }
        Reply::Map(pairs) if pairs.is_empty() => "(empty hash)\n".to_string(),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => {
            let sep = if matches!(reply, Reply::Set(_)) {
                '~'
            } else {
                ')'
            };
            let width = items.len().to_string().len();
            let inner = format!("{prefix}{}", " ".repeat(width + 2));
            let mut out = String::new();
            for (i, item) in items.iter().enumerate() {
                let lead = if i == 0 { "" } else { prefix };
                out.push_str(&format!("{lead}{:>width$}{sep} ", i + 1));
                out.push_str(&format_tty(item, &inner));
            }
            out
        }
        Reply::Map(pairs) => {
            let width = pairs.len().to_string().len();
            let inner = format!("{prefix}{}", " ".repeat(width + 2));
            let mut out = String::new();
            for (i, (key, value)) in pairs.iter().enumerate() {
                let lead = if i == 0 { "" } else { prefix };
                out.push_str(&format!("{lead}{:>width$}# ", i + 1));
                out.push_str(format_tty(key, &inner).trim_end_matches('\n'));
                out.push_str(" => ");
                let nested =
                    matches!(value, Reply::Array(items) | Reply::Set(items) if !items.is_empty());
                if nested {
                    out.push('\n');
                    out.push_str(&inner);
                }
                out.push_str(&format_tty(value, &inner));
            }
            out
        }
    }
}

/// Commands whose replies redis-cli prints raw (its own list).
fn prints_raw(args: &[Vec<u8>]) -> bool {
    let word = |i: usize| {
        args.get(i)
            .map(|a| String::from_utf8_lossy(a).to_lowercase())
            .unwrap_or_default()
    };
    word(0) == "info" || (word(0) == "client" && (word(1) == "list" || word(1) == "info"))
}

fn render(reply: &Reply, raw: bool) -> Vec<String> {
    let text = match reply {
        Reply::Bulk(bytes) if raw => String::from_utf8_lossy(bytes).replace("\r\n", "\n"),
        _ => format_tty(reply, ""),
    };
    text.trim_end()
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

// ---------------------------------------------------------------------------
// Comparing printed replies with the document.
// ---------------------------------------------------------------------------

#[derive(Debug, PartialEq)]
enum Piece {
    Text(String),
    Number(String),
    Uuid(String),
}

fn is_uuid(s: &[u8]) -> bool {
    s.len() == 36
        && s.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

fn pieces(line: &str) -> Vec<Piece> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if boundary && i + 36 <= bytes.len() && is_uuid(&bytes[i..i + 36]) {
            out.push(Piece::Text(std::mem::take(&mut text)));
            out.push(Piece::Uuid(line[i..i + 36].to_string()));
            i += 36;
        } else if boundary
            && (bytes[i].is_ascii_digit()
                || (bytes[i] == b'-' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)))
        {
            let start = i;
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            out.push(Piece::Text(std::mem::take(&mut text)));
            out.push(Piece::Number(line[start..i].to_string()));
        } else {
            text.push(bytes[i] as char);
            i += 1;
        }
    }
    out.push(Piece::Text(text));
    out
}

/// The field a line's value belongs to: `"key" =>` on the line (RESP3), or
/// the string on the line before (a RESP2 field/value array).
fn field_of(lines: &[String], at: usize) -> Option<String> {
    let last_quoted = |line: &str| -> Option<String> {
        let end = line.rfind('"')?;
        let start = line[..end].rfind('"')?;
        Some(line[start + 1..end].to_string())
    };
    if let Some((before, _)) = lines[at].split_once(" => ") {
        return last_quoted(before);
    }
    let previous = lines.get(at.checked_sub(1)?)?;
    if previous.trim_end().ends_with('"') {
        return last_quoted(previous);
    }
    None
}

const TIMED_FIELDS: &[&str] = &["pttl", "waited-ms", "expires-in-ms"];
const ID_FIELDS: &[&str] = &["client-id"];

/// Document values bound to the values of this run.
#[derive(Default)]
struct Bindings {
    /// (namespace, document value) -> actual value.
    forward: HashMap<(&'static str, String), String>,
    backward: HashMap<(&'static str, String), String>,
}

impl Bindings {
    fn bind(&mut self, space: &'static str, doc: &str, actual: &str) -> Result<(), String> {
        let key = (space, doc.to_string());
        match self.forward.get(&key) {
            Some(bound) if bound == actual => return Ok(()),
            Some(bound) => {
                return Err(format!(
                    "{space} {doc} of the document was {bound} before, now {actual}"
                ))
            }
            None => {}
        }
        if let Some(other) = self.backward.get(&(space, actual.to_string())) {
            return Err(format!(
                "{space} {actual} stands for both {other} and {doc} of the document"
            ));
        }
        if space == "token" {
            let (d, a): (i128, i128) = (doc.parse().unwrap(), actual.parse().unwrap());
            for ((s, other_doc), other_actual) in &self.forward {
                if *s != "token" {
                    continue;
                }
                let (od, oa): (i128, i128) =
                    (other_doc.parse().unwrap(), other_actual.parse().unwrap());
                if (d < od) != (a < oa) {
                    return Err(format!(
                        "token order: document {doc} vs {other_doc}, actual {actual} vs {other_actual}"
                    ));
                }
            }
        }
        self.forward.insert(key, actual.to_string());
        self.backward
            .insert((space, actual.to_string()), doc.to_string());
        Ok(())
    }

    /// The actual value to send for a document argument.
    fn substitute(&self, arg: &[u8]) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(arg) else {
            return arg.to_vec();
        };
        for space in ["uuid", "token", "id"] {
            if let Some(actual) = self.forward.get(&(space, text.to_string())) {
                return actual.clone().into_bytes();
            }
        }
        arg.to_vec()
    }
}

fn within(doc: i64, actual: i64) -> bool {
    if doc < 0 || actual < 0 {
        return doc == actual;
    }
    let slack = 1000.max(doc / 10);
    (actual - doc).abs() <= slack
}

/// Compares printed lines with the document's; `id_reply`: the whole reply
/// is a client id.
fn compare(
    doc: &[String],
    actual: &[String],
    bindings: &mut Bindings,
    id_reply: bool,
) -> Result<(), String> {
    if doc.len() != actual.len() {
        return Err(format!(
            "{} lines, the document shows {}",
            actual.len(),
            doc.len()
        ));
    }
    for (at, (d, a)) in doc.iter().zip(actual).enumerate() {
        if d == a && !d.contains(char::is_numeric) {
            continue;
        }
        let (dp, ap) = (pieces(d), pieces(a));
        let mismatch = || format!("line {}: printed {a:?}, the document shows {d:?}", at + 1);
        if dp.len() != ap.len() {
            return Err(mismatch());
        }
        let field = field_of(doc, at);
        let mut after_integer = false;
        let mut after_time = false;
        for (dpiece, apiece) in dp.iter().zip(&ap) {
            let is_integer = std::mem::take(&mut after_integer);
            let is_time = std::mem::take(&mut after_time);
            match (dpiece, apiece) {
                (Piece::Text(x), Piece::Text(y)) if x == y => {
                    after_integer = x.ends_with("(integer) ");
                    after_time = x.ends_with("time=") || x.ends_with("dlock_wait_ms_sum:");
                }
                (Piece::Number(_), Piece::Number(_)) if is_time => {}
                (Piece::Uuid(x), Piece::Uuid(y)) => bindings.bind("uuid", x, y)?,
                (Piece::Number(x), Piece::Number(y)) => {
                    let digits = x.trim_start_matches('-').len();
                    let field = field.as_deref().unwrap_or("");
                    // Only a reply's value, never an index (`7)`, `7#`).
                    let duration = TIMED_FIELDS.contains(&field) || (4..=12).contains(&digits);
                    if digits >= 13 {
                        if y.trim_start_matches('-').len() < 10 {
                            return Err(mismatch());
                        }
                        bindings.bind("token", x, y)?;
                    } else if is_integer && (id_reply || ID_FIELDS.contains(&field)) {
                        bindings.bind("id", x, y)?;
                    } else if is_integer && duration {
                        let (xd, yd): (i64, i64) = (x.parse().unwrap(), y.parse().unwrap());
                        if !within(xd, yd) {
                            return Err(format!("{} (a duration out of range)", mismatch()));
                        }
                    } else if x != y {
                        return Err(mismatch());
                    }
                }
                _ => return Err(mismatch()),
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Running a session.
// ---------------------------------------------------------------------------

struct Run {
    server: Server,
    control: Connection,
    terminals: HashMap<String, Terminal>,
    /// Terminals in SUBSCRIBE mode print "Reading messages..." once.
    bindings: Bindings,
}

impl Run {
    fn terminal(&mut self, name: &str) -> &mut Terminal {
        let port = self.server.port;
        self.terminals
            .entry(name.to_string())
            .or_insert_with(|| Terminal::open(port))
    }

    fn blocked_clients(&mut self) -> i64 {
        info_number(&mut self.control, "clients", "blocked_clients")
    }

    fn connected_clients(&mut self) -> i64 {
        info_number(&mut self.control, "clients", "connected_clients")
    }
}

fn subscribes(args: &[Vec<u8>]) -> usize {
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    match name.as_str() {
        "subscribe" | "psubscribe" | "ssubscribe" => args.len() - 1,
        _ => 0,
    }
}

/// Reads replies until they print at least `lines` lines.
fn read_lines(terminal: &mut Terminal, lines: usize, raw: bool) -> Vec<String> {
    let mut printed = Vec::new();
    while printed.len() < lines.max(1) {
        printed.extend(render(&terminal.read(), raw));
    }
    printed
}

fn run_session(session: &Session) -> Result<(), String> {
    let server = Server::start();
    let control = server.connect();
    let mut run = Run {
        server,
        control,
        terminals: HashMap::new(),
        bindings: Bindings::default(),
    };
    for step in &session.steps {
        match step {
            Step::Resp3(terminal) => {
                let t = run.terminal(terminal);
                t.send(&[b"HELLO".to_vec(), b"3".to_vec()]);
                t.read();
            }
            Step::Sleep(ms) => std::thread::sleep(Duration::from_millis(*ms)),
            Step::Command {
                terminal,
                args,
                expected,
                line,
            } => {
                let args: Vec<Vec<u8>> = args.iter().map(|a| run.bindings.substitute(a)).collect();
                let at = |e: String| format!("{}:{line}: {e}", session.file);
                match expected {
                    None => {
                        let before = run.blocked_clients();
                        run.terminal(terminal).send(&args);
                        let deadline = std::time::Instant::now() + PATIENCE;
                        while run.blocked_clients() <= before {
                            if std::time::Instant::now() > deadline {
                                return Err(at(
                                    "the command shown without a reply did not block".into()
                                ));
                            }
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                    Some(expected) => {
                        let raw = prints_raw(&args);
                        let t = run.terminal(terminal);
                        t.send(&args);
                        let mut printed = Vec::new();
                        let channels = subscribes(&args);
                        if channels > 0 {
                            printed.push("Reading messages... (press Ctrl-C to quit)".to_string());
                            for _ in 0..channels {
                                printed.extend(render(&t.read(), false));
                            }
                        } else {
                            printed = render(&t.read(), raw);
                        }
                        let id_reply = args.len() == 2
                            && args[0].eq_ignore_ascii_case(b"client")
                            && args[1].eq_ignore_ascii_case(b"id");
                        compare(expected, &printed, &mut run.bindings, id_reply)
                            .map_err(|e| at(format!("{e}\nprinted:\n{}", printed.join("\n"))))?;
                    }
                }
            }
            Step::Receive {
                terminal,
                expected,
                line,
            } => {
                let t = run
                    .terminals
                    .get_mut(terminal)
                    .ok_or_else(|| format!("{}:{line}: no terminal {terminal}", session.file))?;
                let printed = read_lines(t, expected.len(), false);
                compare(expected, &printed, &mut run.bindings, false).map_err(|e| {
                    format!(
                        "{}:{line}: {e}\nprinted:\n{}",
                        session.file,
                        printed.join("\n")
                    )
                })?;
            }
            Step::OneShot {
                args,
                expected,
                line,
            } => {
                let args: Vec<Vec<u8>> = args.iter().map(|a| run.bindings.substitute(a)).collect();
                let before = run.connected_clients();
                let mut t = Terminal::open(run.server.port);
                t.send(&args);
                let printed = render(&t.read(), prints_raw(&args));
                drop(t);
                let deadline = std::time::Instant::now() + PATIENCE;
                while run.connected_clients() > before {
                    if std::time::Instant::now() > deadline {
                        return Err(format!(
                            "{}:{line}: the connection stays open",
                            session.file
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                compare(expected, &printed, &mut run.bindings, false).map_err(|e| {
                    format!(
                        "{}:{line}: {e}\nprinted:\n{}",
                        session.file,
                        printed.join("\n")
                    )
                })?;
            }
        }
    }
    Ok(())
}

fn check_file(file: &'static str, at_least: usize) {
    let sessions = sessions(file);
    assert!(
        sessions.len() >= at_least,
        "{file}: found {} sessions, expected at least {at_least}",
        sessions.len()
    );
    let failures: Vec<String> = sessions
        .iter()
        .filter_map(|session| {
            run_session(session)
                .err()
                .map(|e| format!("session at {}:{}: {e}", session.file, session.line))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} sessions differ from the server:\n\n{}",
        failures.len(),
        sessions.len(),
        failures.join("\n\n")
    );
}

#[test]
fn readme_sessions_match_the_server() {
    check_file("README.md", 1);
}

#[test]
fn commands_md_sessions_match_the_server() {
    check_file("docs/commands.md", 10);
}

#[test]
fn the_harness_prints_replies_as_redis_cli_does() {
    let nested = Reply::Array(vec![
        Reply::Int(1),
        Reply::Array(vec![Reply::Bulk(b"a\"b".to_vec()), Reply::Nil]),
    ]);
    assert_eq!(
        render(&nested, false),
        ["1) (integer) 1", "2) 1) \"a\\\"b\"", "   2) (nil)"]
    );
    let map = Reply::Map(vec![
        (Reply::Bulk(b"owner".to_vec()), Reply::Bulk(b"a".to_vec())),
        (
            Reply::Bulk(b"queue".to_vec()),
            Reply::Array(vec![Reply::Bulk(b"b".to_vec()), Reply::Bulk(b"c".to_vec())]),
        ),
        (Reply::Bulk(b"none".to_vec()), Reply::Array(vec![])),
    ]);
    assert_eq!(
        render(&map, false),
        [
            "1# \"owner\" => \"a\"",
            "2# \"queue\" =>",
            "   1) \"b\"",
            "   2) \"c\"",
            "3# \"none\" => (empty array)"
        ]
    );
    let mut bindings = Bindings::default();
    let doc = ["1) (integer) 1795387800865543".to_string()];
    assert!(compare(
        &doc,
        &["1) (integer) 1795462054010674".to_string()],
        &mut bindings,
        false
    )
    .is_ok());
    assert!(
        compare(
            &doc,
            &["1) (integer) 1795462054010675".to_string()],
            &mut bindings,
            false
        )
        .is_err(),
        "one document token stands for one actual token"
    );
    let pttl = ["7) \"pttl\"".to_string(), "8) (integer) 29671".to_string()];
    assert!(compare(
        &pttl,
        &["7) \"pttl\"".into(), "8) (integer) 29990".into()],
        &mut bindings,
        false
    )
    .is_ok());
    assert!(compare(
        &pttl,
        &["7) \"pttl\"".into(), "8) (integer) 5000".into()],
        &mut bindings,
        false
    )
    .is_err());
    assert!(compare(
        &["(integer) 2".into()],
        &["(integer) 3".into()],
        &mut bindings,
        false
    )
    .is_err());
    assert_eq!(
        split_args(r#"EVAL "return redis.call('X', KEYS[1])" 1 'a b'"#),
        [
            b"EVAL".to_vec(),
            b"return redis.call('X', KEYS[1])".to_vec(),
            b"1".to_vec(),
            b"a b".to_vec()
        ]
    );
}
