//! The scenarios, one module each (fairness, 7, comes from the runs of
//! contention, 3), and what they share.

pub mod builds;
pub mod contention;
pub mod expiry;
pub mod instructions;
pub mod latch;
pub mod leader;
pub mod load;
pub mod memory;
pub mod multikey;
pub mod pairs;
pub mod queue;
pub mod shared;
pub mod shared_release;
pub mod tax;
pub mod throughput;
pub mod weighted;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::resp::{Conn, Reply};
use crate::{bail, Res};

/// Why the module API's ceiling (FLOOR.ACQUIRE / SET NX PX) sits near 0.9x
/// on Redis 8.0: a note for scenarios 1 and 2
/// when they run there, so that a missed goal carries its cause.
pub fn redis8_ceiling_note(server_label: &str) -> Option<String> {
    server_label.starts_with("Redis 8").then(|| {
        "On Redis 8.0 a module cannot create a key as cheaply as SET: \
         `RedisModule_ModuleTypeSetValue` stores the value with `setKey(..., SETKEY_NO_SIGNAL)`, \
         which then calls `removeExpire` (a delete probe of the expires table, with its \
         incremental rehash step) on the new key, where `SET ... PX` passes `SETKEY_KEEPTTL` \
         and skips it. A \
         `perf record` of the server under FLOOR.ACQUIRE at pipeline 16 puts 5.5% of its \
         cycles in that `removeExpire`, against none under SET NX PX. The floor module \
         (the fewest module API calls that can take a lock) pays it too, which is why \
         FLOOR.ACQUIRE / SET NX PX reads about 0.9x here and dlock / floor about 1.0x."
            .to_string()
    })
}

/// FLUSHALL SYNC: the next run starts from an empty keyspace.
pub fn flushall(conn: &mut Conn) -> Res<()> {
    let reply = conn.call(&["FLUSHALL", "SYNC"])?;
    if !reply.is_ok() {
        bail!("FLUSHALL replied {reply:?}");
    }
    Ok(())
}

/// The `field:value` lines of `INFO section`.
pub fn info(conn: &mut Conn, section: &str) -> Res<HashMap<String, String>> {
    let text = conn
        .call(&["INFO", section])?
        .as_text()
        .ok_or("INFO did not reply text")?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// One command's line of INFO commandstats.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: u64,
}

/// INFO commandstats, by lower-case command name (`dlock.release`, `evalsha`).
pub fn commandstats(conn: &mut Conn) -> Res<HashMap<String, CommandStat>> {
    let mut stats = HashMap::new();
    for (key, value) in info(conn, "commandstats")? {
        let Some(name) = key.strip_prefix("cmdstat_") else {
            continue;
        };
        let mut stat = CommandStat::default();
        for part in value.split(',') {
            match part.split_once('=') {
                Some(("calls", n)) => stat.calls = n.parse().unwrap_or(0),
                Some(("usec", n)) => stat.usec = n.parse().unwrap_or(0),
                _ => {}
            }
        }
        stats.insert(name.to_lowercase(), stat);
    }
    Ok(stats)
}

/// The wall clock in fractional milliseconds since the epoch (the clock
/// Redis uses for expiry).
pub fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// An integer field of DLOCK.INFO (flat RESP2 array), None when the key is missing.
pub fn dlock_info_int(conn: &mut Conn, key: &str, field: &str) -> Res<Option<i64>> {
    let reply = conn.call(&["DLOCK.INFO", key])?;
    let Some(items) = reply.as_array() else {
        return Ok(None);
    };
    for pair in items.chunks(2) {
        if let [Reply::Bulk(name), value] = pair {
            if name == field.as_bytes() {
                return Ok(value.as_int());
            }
        }
    }
    bail!("DLOCK.INFO {key} has no {field} field: {reply:?}")
}

/// Polls DLOCK.INFO until `waiting` reaches `count`.
pub fn wait_for_waiting(conn: &mut Conn, key: &str, count: i64, patience: Duration) -> Res<()> {
    let deadline = Instant::now() + patience;
    loop {
        let waiting = dlock_info_int(conn, key, "waiting")?.unwrap_or(0);
        if waiting == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{key}: {waiting} waiting after {patience:?}, expected {count}");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Checks a reply, failing the bench with context when it is not as expected.
pub fn expect(what: &str, reply: &Reply, ok: bool) -> Res<()> {
    if ok {
        Ok(())
    } else {
        bail!("{what}: unexpected reply {reply:?}")
    }
}

/// Whether the server knows `command` (COMMAND INFO replies null for an
/// unknown one): scenarios of commands still being built are skipped.
pub fn has_command(conn: &mut Conn, command: &str) -> Res<bool> {
    let reply = conn.call(&["COMMAND", "INFO", command])?;
    Ok(matches!(reply.as_array(), Some([first]) if !first.is_nil()))
}

/// A section that only says why its scenario did not run.
/// `goals`: (target, goal) pairs, listed in the targets table as not run.
pub fn skipped(
    number: u32,
    title: &str,
    why: &str,
    goals: &[(&str, &str)],
) -> crate::report::Section {
    println!("           scenario {number} skipped: {why}");
    let mut section = crate::report::Section::new(number, title);
    section.about = format!("**Not available in this run:** {why}");
    for (what, goal) in goals {
        section
            .targets
            .push(crate::report::Target::not_run(what, goal));
    }
    section
}

/// Whether DLOCK.ACQUIRE takes the SHARED option (issue 11).
pub fn has_shared(conn: &mut Conn) -> Res<bool> {
    grants(
        conn,
        &[
            "DLOCK.ACQUIRE",
            "bench:probe:shared",
            "probe",
            "1000",
            "SHARED",
            "LIMIT",
            "2",
        ],
    )
}

/// Whether the server grants `acquire` (a DLOCK.ACQUIRE of a probe key,
/// deleted afterwards): an error reply means an option it lacks, which is
/// a reply here, not a failure of the bench.
pub fn grants(conn: &mut Conn, acquire: &[&str]) -> Res<bool> {
    conn.queue(acquire);
    conn.flush()?;
    let reply = conn.read()?;
    if let Some(key) = acquire.get(1) {
        conn.call(&["DEL", key])?;
    }
    Ok(reply.is_grant())
}

/// A small xorshift generator: each client its own, seeded from its index,
/// so runs are reproducible and cost no locking.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}
