//! The commands that look: `info`, `list` and `top`. They send read-only
//! commands (`DLOCK.INFO`, `SCAN`, `TYPE`, `TIME`, `INFO dlock`) on plain
//! connections to every master.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use dlock_client::redis::{self, aio::MultiplexedConnection, Value};
use serde_json::json;

use crate::args::{Connection, InfoArgs, ListArgs, TopArgs};
use crate::child::Signals;
use crate::connect::{self, Target};
use crate::{Failure, Outcome};

const LOCK_TYPE: &str = "dlocklock";
const LATCH_TYPE: &str = "dlocklatc";

/// One holder of a lock (an entry of DLOCK.INFO's `holders`).
pub struct Holder {
    owner: String,
    exclusive: i64,
    shared: i64,
    token: i64,
    pttl: i64,
    weight: i64,
}

/// A lock as DLOCK.INFO describes it.
pub struct LockState {
    owner: Option<String>,
    holds: i64,
    token: i64,
    pttl: i64,
    waiting: i64,
    queue: Vec<String>,
    shared: i64,
    holders: Vec<Holder>,
}

/// A latch as DLOCK.INFO describes it.
pub struct LatchState {
    count: i64,
    pttl: i64,
    waiting: i64,
}

pub enum State {
    Lock(LockState),
    Latch(LatchState),
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn int(value: Option<&Value>) -> i64 {
    match value {
        Some(Value::Int(n)) => *n,
        _ => 0,
    }
}

fn unexpected(what: &str, value: &Value) -> Failure {
    Failure::new(
        crate::code::UNAVAILABLE,
        format!("the server's reply to {what} is not one dlock sends ({value:?}): is this the dlock module?"),
    )
}

/// Parses a DLOCK.INFO reply (RESP2 array or RESP3 map); None for null.
fn parse_info(reply: &Value) -> Result<Option<State>, Failure> {
    let pairs: Vec<(String, &Value)> = match reply {
        Value::Nil => return Ok(None),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [name, value] => text(name).map(|name| (name, value)),
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(name, value)| text(name).map(|name| (name, value)))
            .collect(),
        other => return Err(unexpected("DLOCK.INFO", other)),
    };
    let field = |name: &str| pairs.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    if field("count").is_some() {
        return Ok(Some(State::Latch(LatchState {
            count: int(field("count")),
            pttl: int(field("pttl")),
            waiting: int(field("waiting")),
        })));
    }
    let queue = match field("queue") {
        Some(Value::Array(items)) => items.iter().filter_map(text).collect(),
        _ => Vec::new(),
    };
    let holders = match field("holders") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|entry| match entry {
                Value::Array(e) if e.len() >= 6 => Some(Holder {
                    owner: text(&e[0]).unwrap_or_default(),
                    exclusive: int(e.get(1)),
                    shared: int(e.get(2)),
                    token: int(e.get(3)),
                    pttl: int(e.get(4)),
                    weight: int(e.get(5)),
                }),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Ok(Some(State::Lock(LockState {
        owner: field("owner").and_then(text),
        holds: int(field("holds")),
        token: int(field("token")),
        pttl: int(field("pttl")),
        waiting: int(field("waiting")),
        queue,
        shared: int(field("shared")),
        holders,
    })))
}

impl LockState {
    /// The lease left of the hold that ends first, None when nobody holds.
    fn lease_left(&self) -> Option<i64> {
        if self.owner.is_some() {
            return Some(self.pttl);
        }
        self.holders.iter().map(|h| h.pttl).min()
    }

    /// The oldest hold's token (tokens are microseconds since the epoch
    /// when granted, at most one per microsecond).
    fn oldest_token(&self) -> Option<i64> {
        self.holders.iter().map(|h| h.token).min()
    }
}

fn state_json(key: &str, state: &State) -> serde_json::Value {
    match state {
        State::Lock(lock) => json!({
            "key": key,
            "type": "lock",
            "owner": lock.owner,
            "holds": lock.holds,
            "token": lock.token,
            "pttl": lock.pttl,
            "waiting": lock.waiting,
            "queue": lock.queue,
            "shared": lock.shared,
            "holders": lock.holders.iter().map(|h| json!({
                "owner": h.owner,
                "exclusive": h.exclusive,
                "shared": h.shared,
                "token": h.token,
                "pttl": h.pttl,
                "weight": h.weight,
            })).collect::<Vec<_>>(),
        }),
        State::Latch(latch) => json!({
            "key": key,
            "type": "latch",
            "count": latch.count,
            "pttl": latch.pttl,
            "waiting": latch.waiting,
        }),
    }
}

fn state_text(key: &str, state: &State) -> String {
    let mut out = String::new();
    let mut line = |name: &str, value: String| out.push_str(&format!("{name:<8} {value}\n"));
    line("key", key.to_string());
    match state {
        State::Lock(lock) => {
            line("type", "lock".into());
            line("owner", lock.owner.clone().unwrap_or_else(|| "-".into()));
            line("holds", lock.holds.to_string());
            line("token", lock.token.to_string());
            line("pttl", lock.pttl.to_string());
            line("waiting", lock.waiting.to_string());
            line(
                "queue",
                if lock.queue.is_empty() {
                    "-".into()
                } else {
                    lock.queue.join(" ")
                },
            );
            line("shared", lock.shared.to_string());
            line("holders", lock.holders.len().to_string());
            for h in &lock.holders {
                out.push_str(&format!(
                    "  {} exclusive={} shared={} token={} pttl={} weight={}\n",
                    h.owner, h.exclusive, h.shared, h.token, h.pttl, h.weight
                ));
            }
        }
        State::Latch(latch) => {
            line("type", "latch".into());
            line("count", latch.count.to_string());
            line("pttl", latch.pttl.to_string());
            line("waiting", latch.waiting.to_string());
        }
    }
    out
}

pub async fn info(connection: &Connection, args: InfoArgs) -> Outcome {
    let target = connect::resolve(connection).await?;
    let masters = connect::masters(&target).await?;
    let mut reply = None;
    for (_, mut conn) in masters {
        let result: redis::RedisResult<Value> = redis::cmd("DLOCK.INFO")
            .arg(&args.key)
            .query_async(&mut conn)
            .await;
        match result {
            // In a Cluster, only the key's master answers without MOVED.
            Err(error) if error.code() == Some("MOVED") || error.code() == Some("ASK") => continue,
            Err(error) => return Err(connect::refused_redis(&target, Some(&args.key), error)),
            Ok(value) => {
                reply = Some(value);
                break;
            }
        }
    }
    let state = parse_info(&reply.unwrap_or(Value::Nil))?;
    let mut out = std::io::stdout();
    let printed = match (&state, args.json) {
        (None, true) => writeln!(out, "null"),
        (None, false) => writeln!(out, "{}: no such lock or latch", args.key),
        (Some(state), true) => writeln!(out, "{}", state_json(&args.key, state)),
        (Some(state), false) => write!(out, "{}", state_text(&args.key, state)),
    };
    let _ = printed.and_then(|()| out.flush());
    Ok(0)
}

/// Every lock and latch key matching `pattern` on one master, with its state.
async fn scan_one(
    target: &Target,
    conn: &mut MultiplexedConnection,
    pattern: &str,
) -> Result<Vec<(String, State)>, Failure> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(|e| connect::refused_redis(target, None, e))?;
        if !batch.is_empty() {
            let mut types = redis::pipe();
            for key in &batch {
                types.cmd("TYPE").arg(key);
            }
            let types: Vec<String> = types
                .query_async(conn)
                .await
                .map_err(|e| connect::refused_redis(target, None, e))?;
            keys.extend(
                batch
                    .into_iter()
                    .zip(types)
                    .filter(|(_, kind)| kind == LOCK_TYPE || kind == LATCH_TYPE)
                    .map(|(key, _)| key),
            );
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut infos = redis::pipe();
    for key in &keys {
        infos.cmd("DLOCK.INFO").arg(key);
    }
    let replies: Vec<Value> = infos
        .query_async(conn)
        .await
        .map_err(|e| connect::refused_redis(target, None, e))?;
    let mut states = Vec::with_capacity(keys.len());
    for (key, reply) in keys.into_iter().zip(replies) {
        if let Value::ServerError(_) = reply {
            continue; // the key changed type in between
        }
        if let Some(state) = parse_info(&reply)? {
            states.push((key, state));
        }
    }
    Ok(states)
}

async fn scan_all(
    target: &Target,
    masters: &mut [(String, MultiplexedConnection)],
    pattern: &str,
) -> Result<Vec<(String, State)>, Failure> {
    let mut all = Vec::new();
    for (_, conn) in masters.iter_mut() {
        all.extend(scan_one(target, conn, pattern).await?);
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(all)
}

/// Left-aligned columns, two spaces apart, the last one unpadded.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub async fn list(connection: &Connection, args: ListArgs) -> Outcome {
    let target = connect::resolve(connection).await?;
    let mut masters = connect::masters(&target).await?;
    let states = scan_all(&target, &mut masters, &args.pattern).await?;
    let mut out = std::io::stdout();
    let printed = if args.json {
        let entries: Vec<serde_json::Value> = states
            .iter()
            .map(|(key, state)| match state {
                State::Lock(lock) => json!({
                    "key": key,
                    "type": "lock",
                    "holders": lock.holders.iter().map(|h| h.owner.clone()).collect::<Vec<_>>(),
                    "waiting": lock.waiting,
                    "pttl": lock.lease_left(),
                }),
                State::Latch(latch) => json!({
                    "key": key,
                    "type": "latch",
                    "count": latch.count,
                    "waiting": latch.waiting,
                    "pttl": latch.pttl,
                }),
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(entries))
    } else {
        let mut rows = vec![vec![
            "KEY".to_string(),
            "TYPE".into(),
            "HOLDERS".into(),
            "WAITING".into(),
            "LEASE_MS".into(),
        ]];
        for (key, state) in &states {
            rows.push(match state {
                State::Lock(lock) => vec![
                    key.clone(),
                    "lock".into(),
                    lock.holders.len().to_string(),
                    lock.waiting.to_string(),
                    lock.lease_left().map_or("-".into(), |ms| ms.to_string()),
                ],
                State::Latch(latch) => vec![
                    key.clone(),
                    format!("latch({})", latch.count),
                    "-".into(),
                    latch.waiting.to_string(),
                    latch.pttl.to_string(),
                ],
            });
        }
        write!(out, "{}", table(&rows))
    };
    let _ = printed.and_then(|()| out.flush());
    Ok(0)
}

/// The counters of `INFO dlock`, summed over the masters, and the
/// server's time (of the first master) in microseconds.
async fn sample(
    target: &Target,
    masters: &mut [(String, MultiplexedConnection)],
) -> Result<(BTreeMap<String, i64>, i64), Failure> {
    let mut counters = BTreeMap::new();
    let mut now_us = 0;
    for (index, (_, conn)) in masters.iter_mut().enumerate() {
        let info: String = redis::cmd("INFO")
            .arg("dlock")
            .query_async(conn)
            .await
            .map_err(|e| connect::refused_redis(target, None, e))?;
        for line in info.lines() {
            if let Some((name, value)) = line.split_once(':') {
                if let Ok(value) = value.trim().parse::<i64>() {
                    *counters.entry(name.to_string()).or_insert(0) += value;
                }
            }
        }
        if index == 0 {
            let (seconds, micros): (i64, i64) = redis::cmd("TIME")
                .query_async(conn)
                .await
                .map_err(|e| connect::refused_redis(target, None, e))?;
            now_us = seconds * 1_000_000 + micros;
        }
    }
    if !counters.contains_key("dlock_acquires") {
        return Err(Failure::new(
            crate::code::UNAVAILABLE,
            format!(
                "the server at {} shows no dlock section in INFO: load the module (loadmodule .../libdlock.so)",
                target.shown()
            ),
        ));
    }
    Ok((counters, now_us))
}

/// One screen of `top`.
fn screen(
    target: &Target,
    states: &[(String, State)],
    before: Option<&(BTreeMap<String, i64>, Instant)>,
    after: &(BTreeMap<String, i64>, Instant),
    now_us: i64,
    rows: usize,
) -> String {
    let rate = |names: &[&str]| -> String {
        let Some((old, at)) = before else {
            return "-".into();
        };
        let seconds = after.1.duration_since(*at).as_secs_f64().max(1e-3);
        let delta: i64 = names
            .iter()
            .map(|n| after.0.get(*n).copied().unwrap_or(0) - old.get(*n).copied().unwrap_or(0))
            .sum();
        format!("{:.1}", delta.max(0) as f64 / seconds)
    };
    let counter = |name: &str| after.0.get(name).copied().unwrap_or(0);
    let mut locks: Vec<(&String, &LockState)> = states
        .iter()
        .filter_map(|(key, state)| match state {
            State::Lock(lock) => Some((key, lock)),
            State::Latch(_) => None,
        })
        .collect();
    // The hottest first: the most waiters, then the longest hold.
    locks.sort_by(|a, b| {
        b.1.waiting
            .cmp(&a.1.waiting)
            .then(
                a.1.oldest_token()
                    .unwrap_or(i64::MAX)
                    .cmp(&b.1.oldest_token().unwrap_or(i64::MAX)),
            )
            .then(a.0.cmp(b.0))
    });
    let mut out = format!(
        "dlock top  {}  locks {}  grants/s {}  handoffs/s {}  expiries/s {}  blocked {}\n\n",
        target.shown(),
        locks.len(),
        rate(&["dlock_acquires", "dlock_handoffs"]),
        rate(&["dlock_handoffs"]),
        rate(&["dlock_lease_expiries"]),
        counter("dlock_blocked_clients"),
    );
    let mut table_rows = vec![vec![
        "KEY".to_string(),
        "WAITING".into(),
        "HOLDERS".into(),
        "HELD_S".into(),
        "LEASE_MS".into(),
        "OWNER".into(),
    ]];
    for (key, lock) in locks.iter().take(rows) {
        let held = lock.oldest_token().map_or("-".to_string(), |token| {
            format!("{:.1}", (now_us - token).max(0) as f64 / 1e6)
        });
        let owner = match (&lock.owner, lock.holders.len()) {
            (Some(owner), _) => owner.clone(),
            (None, 0) => "-".into(),
            (None, n) => format!("{n} shared"),
        };
        table_rows.push(vec![
            (*key).clone(),
            lock.waiting.to_string(),
            lock.holders.len().to_string(),
            held,
            lock.lease_left().map_or("-".into(), |ms| ms.to_string()),
            owner,
        ]);
    }
    out.push_str(&table(&table_rows));
    out
}

fn terminal_rows() -> usize {
    // SAFETY: TIOCGWINSZ writes one winsize into the struct we pass.
    unsafe {
        let mut size: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) == 0 && size.ws_row > 0 {
            return size.ws_row as usize;
        }
    }
    24
}

pub async fn top(connection: &Connection, args: TopArgs) -> Outcome {
    let target = connect::resolve(connection).await?;
    let mut masters = connect::masters(&target).await?;
    let interval = args.interval.max(Duration::from_millis(100));
    let (first, _) = sample(&target, &mut masters).await?;
    let mut before = (first, Instant::now());
    if args.once {
        tokio::time::sleep(interval).await;
        let (counters, now_us) = sample(&target, &mut masters).await?;
        let after = (counters, Instant::now());
        let states = scan_all(&target, &mut masters, &args.pattern).await?;
        let text = screen(
            &target,
            &states,
            Some(&before),
            &after,
            now_us,
            args.rows.unwrap_or(20),
        );
        let mut out = std::io::stdout();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        return Ok(0);
    }
    let mut signals = Signals::catch()?;
    let mut out = std::io::stdout();
    // The alternate screen, without a cursor, given back on exit.
    let _ = write!(out, "\x1b[?1049h\x1b[?25l");
    let mut first_screen = true;
    let result = loop {
        let (counters, now_us) = match sample(&target, &mut masters).await {
            Ok(sampled) => sampled,
            Err(failure) => break Err(failure),
        };
        let after = (counters, Instant::now());
        let states = match scan_all(&target, &mut masters, &args.pattern).await {
            Ok(states) => states,
            Err(failure) => break Err(failure),
        };
        let rows = args
            .rows
            .unwrap_or_else(|| terminal_rows().saturating_sub(4).max(1));
        let previous = if first_screen { None } else { Some(&before) };
        let text = screen(&target, &states, previous, &after, now_us, rows);
        let text = text.replace('\n', "\x1b[K\r\n");
        let _ = write!(out, "\x1b[H{text}\x1b[J");
        let _ = out.flush();
        before = after;
        first_screen = false;
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = signals.recv() => break Ok(0),
        }
    };
    let _ = write!(out, "\x1b[?25h\x1b[?1049l");
    let _ = out.flush();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_pads_every_column_but_the_last() {
        let rows = vec![
            vec!["KEY".to_string(), "N".into(), "OWNER".into()],
            vec!["orders:42".to_string(), "10".into(), "w".into()],
        ];
        assert_eq!(table(&rows), "KEY        N   OWNER\norders:42  10  w\n");
    }
}
