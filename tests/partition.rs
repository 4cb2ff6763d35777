//! Failover under real network partitions (`make partition`; a short run in
//! `make test`).
//!
//! A master, two replicas and three Sentinels, each in its own network
//! namespace, joined by a bridge (tests/netns); 16 clients in two namespaces
//! of their own find the master through Sentinel and run a lock workload on
//! 4 keys: leases of 1-2 s, renewals, releases, walk-aways, half the requests
//! with `BLOCK`. Every critical section writes to a fenced resource (a log
//! per key that refuses a token lower than the highest it has seen). Each
//! scenario cuts, kills or slows part of the network under test control:
//!
//! 1. `partition`: the master, one Sentinel and half the clients are cut off
//!    from the rest; the majority's Sentinels promote a replica; clients on
//!    both sides keep working; the network heals.
//! 2. `kill`: the master is killed with SIGKILL and restarted 300 ms
//!    later, with AOF (`appendfsync everysec`) and without persistence.
//! 3. `lag`: the link to one replica is slowed with `tc` until it lags
//!    seconds behind, then the master is killed and that replica promoted.
//!
//! Each runs with and without the grace window (`dlock.grace-ms` =
//! `dlock.max-lease-ms` = 2000). Every client records, by its own clock, when
//! it believed it held a lock: from the grant's reply to the end of its lease
//! (the lease measured from before the request, or from before the last
//! successful RENEW) or to the moment it sent RELEASE. A grant from the queue
//! (`BLOCK`) is believed only once a RENEW right after it succeeded, because
//! its client cannot know when the server granted it.
//!
//! Checks: the fenced resource never accepts a write out of token order (in
//! every scenario and mode); with the grace window the overlap (the longest
//! time two clients believed they held the same lock) is zero in scenarios
//! 1 and 2; without it the overlap is reported, not hidden. Each run writes
//! its figures into the generated table of docs/reliability.md (`make
//! partition`) or target/partition-report.md (the short run of `make test`).
//!
//! `DLOCK_PARTITION_SECS` (default 15) sets the length of each run;
//! `DLOCK_PARTITION_SEED` replays one. The suite needs root and network
//! namespaces; without them it skips, saying why. Under `DLOCK_SERVER` (the
//! Valkey pass of `make test`) it runs only if `DLOCK_PARTITION=1`.

use crate::common;
use crate::netns;

use common::{env_number, module_path, seed_from_env, server_binary, TestRng};
use netns::{in_ns, poll, Host, Net, NetProcess, SideLink};
use redis::{Connection, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SERVER_PORT: u16 = 6379;
const SENTINEL_PORT: u16 = 26379;
const MASTER_NAME: &str = "dl";
const CLIENTS: usize = 16;
const KEYS: [&str; 4] = ["lock:a", "lock:b", "lock:c", "lock:d"];
/// Longest lease a client asks for; also `dlock.max-lease-ms` and
/// `dlock.grace-ms` when the grace window is on.
const MAX_LEASE_MS: u64 = 2_000;
const MIN_LEASE_MS: u64 = 1_000;
/// Sentinel: a master unreachable this long is down; small so that a
/// failover takes a few seconds, and at least (min-replicas-max-lag + 3) s
/// so that a cut-off master has stopped granting before the promotion (see
/// docs/operations.md, "Failover guarantees and their settings").
const DOWN_AFTER_MS: u64 = 4_000;
/// The lag scenario kills its master (which then grants nothing): Sentinel
/// may promote as fast as it can, faster than a lease runs out.
const LAG_DOWN_AFTER_MS: u64 = 1_500;
const FAILOVER_TIMEOUT_MS: u64 = 6_000;
const PATIENCE: Duration = Duration::from_secs(40);

/// What happens to the network and the servers during a run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scenario {
    Partition,
    Kill,
    Lag,
}

impl Scenario {
    fn number(self) -> u8 {
        match self {
            Scenario::Partition => 1,
            Scenario::Kill => 2,
            Scenario::Lag => 3,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Scenario::Partition => "master partitioned from the majority",
            Scenario::Kill => "master killed (-9) and restarted",
            Scenario::Lag => "lagging replica promoted",
        }
    }
}

/// The servers' settings for one run.
#[derive(Clone, Copy, Debug)]
struct Settings {
    grace: bool,
    /// `appendfsync` policy, or None for no persistence at all.
    aof: Option<&'static str>,
    min_replicas: bool,
}

impl Settings {
    fn describe(&self) -> String {
        let mut parts = vec![if self.grace {
            format!("grace-ms = max-lease-ms = {MAX_LEASE_MS}")
        } else {
            "no grace window".to_string()
        }];
        parts.push(match self.aof {
            Some(policy) => format!("AOF {policy}"),
            None => "no persistence".to_string(),
        });
        if self.min_replicas {
            parts.push("min-replicas-to-write 1".to_string());
        }
        parts.join(", ")
    }
}

// ---------------------------------------------------------------------------
// The cluster: servers and Sentinels in their namespaces
// ---------------------------------------------------------------------------

struct Cluster {
    // Processes first: they are dropped (killed) before the network.
    servers: Vec<NetProcess>,
    sentinels: Vec<NetProcess>,
    server_hosts: Vec<Host>,
    sentinel_hosts: Vec<Host>,
    client_hosts: Vec<Host>,
    side_link: Option<SideLink>,
    dir: PathBuf,
    net: Net,
}

impl Cluster {
    fn start(tag: &str, settings: Settings, lagging_replica: bool) -> Cluster {
        let down_after_ms = if lagging_replica {
            LAG_DOWN_AFTER_MS
        } else {
            DOWN_AFTER_MS
        };
        let dir = std::env::temp_dir().join(format!(
            "dlock-partition-{}-{tag}-{}",
            std::process::id(),
            common::wall_us()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the run directory");
        let mut net = Net::new();
        let server_hosts: Vec<Host> = ["m", "r1", "r2"].iter().map(|n| net.add_host(n)).collect();
        let sentinel_hosts: Vec<Host> =
            ["s1", "s2", "s3"].iter().map(|n| net.add_host(n)).collect();
        let client_hosts: Vec<Host> = ["ca", "cb"].iter().map(|n| net.add_host(n)).collect();
        // The lagging replica (r1) replicates over a link of its own, the
        // one the test slows down; Sentinels and clients reach it as usual.
        let side_link =
            lagging_replica.then(|| net.add_side_link(&server_hosts[0], &server_hosts[1]));
        let mut cluster = Cluster {
            servers: Vec::new(),
            sentinels: Vec::new(),
            server_hosts,
            sentinel_hosts,
            client_hosts,
            side_link,
            dir,
            net,
        };
        let master_ip = cluster.server_hosts[0].ip.clone();
        for (index, host) in cluster.server_hosts.clone().iter().enumerate() {
            let server_dir = cluster.dir.join(&host.name);
            std::fs::create_dir_all(&server_dir).expect("server directory");
            let mut args = strings(&[
                "--port",
                &SERVER_PORT.to_string(),
                "--bind",
                "0.0.0.0",
                "--protected-mode",
                "no",
                "--dir",
                &server_dir.to_string_lossy(),
                "--logfile",
                "server.log",
                "--daemonize",
                "no",
                "--save",
                "",
                "--repl-diskless-sync-delay",
                "0",
                "--loadmodule",
                &module_path().to_string_lossy(),
            ]);
            match settings.aof {
                Some(policy) => {
                    args.extend(strings(&["--appendonly", "yes", "--appendfsync", policy]))
                }
                None => args.extend(strings(&["--appendonly", "no"])),
            }
            if settings.min_replicas {
                args.extend(strings(&[
                    "--min-replicas-to-write",
                    "1",
                    "--min-replicas-max-lag",
                    "1",
                ]));
            }
            if settings.grace {
                args.extend(strings(&[
                    "--dlock.max-lease-ms",
                    &MAX_LEASE_MS.to_string(),
                    "--dlock.grace-ms",
                    &MAX_LEASE_MS.to_string(),
                ]));
            }
            // The lag scenario promotes the slowed replica r1: r2 never.
            let priority = if lagging_replica && index == 2 {
                "0"
            } else {
                "100"
            };
            args.extend(strings(&["--replica-priority", priority]));
            if let (Some(link), 1) = (&cluster.side_link, index) {
                // r1 reaches the master's address through its own link (so
                // Sentinel sees the usual address) and announces its main one.
                cluster.net.route_through(host, &master_ip, link);
                args.extend(strings(&["--replica-announce-ip", &host.ip]));
            }
            if index > 0 {
                args.extend(strings(&[
                    "--replicaof",
                    &master_ip,
                    &SERVER_PORT.to_string(),
                ]));
            }
            let process =
                NetProcess::start(host, &server_binary(), &args, &server_dir, "server.log");
            cluster.servers.push(process);
        }
        for index in 0..3 {
            let host = cluster.server_hosts[index].clone();
            let up = poll(PATIENCE, || {
                cluster.query(&host, SERVER_PORT, &["PING"]).is_ok()
            });
            cluster.assert_that(up, &format!("server {} answers PING", host.name));
        }
        for index in 1..3 {
            let host = cluster.server_hosts[index].clone();
            let linked = poll(PATIENCE, || {
                cluster
                    .info_text(&host, "replication")
                    .contains("master_link_status:up")
            });
            cluster.assert_that(linked, &format!("replica {} linked", host.name));
        }
        for host in cluster.sentinel_hosts.clone() {
            let sentinel_dir = cluster.dir.join(&host.name);
            std::fs::create_dir_all(&sentinel_dir).expect("sentinel directory");
            let conf = format!(
                "port {SENTINEL_PORT}\nbind 0.0.0.0\nprotected-mode no\ndaemonize no\n\
                 dir {dir}\nlogfile sentinel.log\n\
                 sentinel monitor {MASTER_NAME} {master_ip} {SERVER_PORT} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n\
                 sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                dir = sentinel_dir.display()
            );
            let conf_path = sentinel_dir.join("sentinel.conf");
            std::fs::write(&conf_path, conf).expect("write sentinel.conf");
            let args = strings(&[&conf_path.to_string_lossy(), "--sentinel"]);
            let process = NetProcess::start(
                &host,
                &server_binary(),
                &args,
                &sentinel_dir,
                "sentinel.log",
            );
            cluster.sentinels.push(process);
        }
        // Failover needs every Sentinel to know the others and the replicas.
        for host in cluster.sentinel_hosts.clone() {
            let ready = poll(PATIENCE, || {
                let fields = cluster.sentinel_master(&host);
                fields.get("num-other-sentinels").map(String::as_str) == Some("2")
                    && fields.get("num-slaves").map(String::as_str) == Some("2")
            });
            cluster.assert_that(ready, &format!("Sentinel {} sees the others", host.name));
        }
        cluster
    }

    /// Panics with the logs when `condition` is false.
    fn assert_that(&self, condition: bool, what: &str) {
        if !condition {
            let mut logs = String::new();
            for process in self.servers.iter().chain(&self.sentinels) {
                logs.push_str(&format!(
                    "\n--- {} ---\n{}",
                    process.log.display(),
                    process.log_tail()
                ));
            }
            panic!("timed out waiting until: {what}{logs}");
        }
    }

    /// A command sent from inside `host`'s own namespace (never cut off).
    fn query(&self, host: &Host, port: u16, args: &[&str]) -> redis::RedisResult<Value> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        in_ns(&host.ns, move || {
            let mut conn = connect("127.0.0.1", port, Duration::from_secs(2))?;
            let mut command = redis::cmd(&args[0]);
            for arg in &args[1..] {
                command.arg(arg);
            }
            command.query(&mut conn)
        })
    }

    fn info_text(&self, host: &Host, section: &str) -> String {
        match self.query(host, SERVER_PORT, &["INFO", section]) {
            Ok(Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).to_string(),
            Ok(Value::VerbatimString { text, .. }) => text,
            _ => String::new(),
        }
    }

    fn sentinel_master(&self, host: &Host) -> HashMap<String, String> {
        let mut fields = HashMap::new();
        if let Ok(Value::Array(items)) =
            self.query(host, SENTINEL_PORT, &["SENTINEL", "MASTER", MASTER_NAME])
        {
            for pair in items.chunks(2) {
                if let [Value::BulkString(name), Value::BulkString(value)] = pair {
                    fields.insert(
                        String::from_utf8_lossy(name).to_string(),
                        String::from_utf8_lossy(value).to_string(),
                    );
                }
            }
        }
        fields
    }

    /// The master's address according to Sentinel `index`.
    fn master_by(&self, index: usize) -> Option<String> {
        let host = &self.sentinel_hosts[index];
        match self.query(
            host,
            SENTINEL_PORT,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        ) {
            Ok(Value::Array(items)) => match items.first() {
                Some(Value::BulkString(ip)) => Some(String::from_utf8_lossy(ip).to_string()),
                _ => None,
            },
            _ => None,
        }
    }

    /// Polls the majority's Sentinels until one names another master than
    /// the first one, or `until`; how long after `since` that was.
    fn wait_for_promotion(&self, since: Instant, until: Instant) -> Option<Duration> {
        let first = self.server_hosts[0].ip.clone();
        while Instant::now() < until {
            if (1..3).any(|i| self.master_by(i).is_some_and(|ip| ip != first)) {
                return Some(since.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    fn sentinel_ips(&self) -> Vec<String> {
        self.sentinel_hosts.iter().map(|h| h.ip.clone()).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for process in self.servers.iter_mut().chain(self.sentinels.iter_mut()) {
            process.kill();
        }
        if !std::thread::panicking() && std::env::var_os("DLOCK_PARTITION_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("partition run files kept in {}", self.dir.display());
        }
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn connect(ip: &str, port: u16, read_timeout: Duration) -> redis::RedisResult<Connection> {
    let client = redis::Client::open(format!("redis://{ip}:{port}/"))?;
    let conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
    conn.set_read_timeout(Some(read_timeout))?;
    conn.set_write_timeout(Some(read_timeout))?;
    Ok(conn)
}

// ---------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------

/// The protected resource of one lock: refuses a token lower than the
/// highest it has accepted.
#[derive(Default)]
struct Fence {
    highest: i64,
    accepted: Vec<i64>,
    refused: u64,
}

impl Fence {
    fn write(&mut self, token: i64) -> bool {
        if token < self.highest {
            self.refused += 1;
            return false;
        }
        self.highest = token;
        self.accepted.push(token);
        true
    }
}

/// When a client believed it held a lock, by its own clock.
#[derive(Clone, Debug)]
struct Belief {
    key: usize,
    client: usize,
    token: i64,
    start: Instant,
    end: Instant,
    /// How the hold went, for the trace of the longest overlap.
    story: String,
}

#[derive(Default)]
struct ClientRecord {
    beliefs: Vec<Belief>,
    grants: u64,
    handoffs: u64,
    nulls: u64,
    errors: u64,
    renewals: u64,
    lost: u64,
}

struct Shared {
    fences: Vec<Mutex<Fence>>,
    stop: AtomicBool,
}

/// One client: finds the master through the Sentinels (those on its own
/// side first), runs lock cycles until told to stop.
fn client_loop(
    id: usize,
    ns: String,
    sentinels: Vec<String>,
    mut rng: TestRng,
    shared: Arc<Shared>,
) -> ClientRecord {
    netns::enter(&ns);
    let mut record = ClientRecord::default();
    let mut acquisitions = 0u64;
    let mut conn: Option<Connection> = None;
    let mut master = String::new();
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(link) = conn.as_mut() else {
            match find_master(&sentinels) {
                Some((found, ip)) => {
                    conn = Some(found);
                    master = ip;
                }
                None => std::thread::sleep(Duration::from_millis(100)),
            }
            continue;
        };
        // A unique owner per acquisition, as every client must use: with
        // one owner per client, a later acquisition of the same key would
        // re-enter a hold it walked away from and reset (shorten) its lease,
        // ending the earlier belief on the server before the client's clock.
        acquisitions += 1;
        let owner = format!("client-{id}-{acquisitions}");
        let key_index = rng.below(KEYS.len() as u64) as usize;
        let key = KEYS[key_index];
        let ttl = rng.between(MIN_LEASE_MS, MAX_LEASE_MS);
        let ttl_text = ttl.to_string();
        let lease = Duration::from_millis(ttl);
        let block = rng.percent(50);
        let sent = Instant::now();
        let mut command = redis::cmd("DLOCK.ACQUIRE");
        command.arg(key).arg(&owner).arg(&ttl_text);
        if block {
            command.arg("BLOCK").arg(1_500);
        }
        let reply: redis::RedisResult<Value> = command.query(link);
        let received = Instant::now();
        let token = match reply {
            Ok(Value::Array(items)) => match items.first() {
                Some(Value::Int(token)) => *token,
                _ => {
                    record.errors += 1;
                    conn = None;
                    continue;
                }
            },
            Ok(_) => {
                record.nulls += 1;
                std::thread::sleep(Duration::from_millis(rng.between(20, 120)));
                continue;
            }
            Err(_) => {
                record.errors += 1;
                conn = None;
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        record.grants += 1;
        let mut end = sent + lease;
        if block {
            if received - sent > Duration::from_millis(20) {
                record.handoffs += 1;
            }
            // Granted from the queue at an unknown moment: the lease is
            // known only from a RENEW.
            let renew_sent = Instant::now();
            end = match renew(link, key, &owner, &ttl_text) {
                Ok(()) => renew_sent + lease,
                Err(_) => received,
            };
        }
        let mut story = String::new();
        let mut work_until = received + Duration::from_millis(rng.between(300, 2_500));
        let mut released = false;
        let mut broken = false;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let accepted = shared.fences[key_index]
                .lock()
                .map(|mut fence| fence.write(token))
                .unwrap_or(false);
            if !accepted || now >= work_until {
                break;
            }
            if !broken && end - now < lease / 2 {
                let renew_sent = Instant::now();
                match renew(link, key, &owner, &ttl_text) {
                    Ok(()) => {
                        record.renewals += 1;
                        end = renew_sent + lease;
                        story.push_str(&format!(
                            "renewed {} ms after the grant; ",
                            (renew_sent - received).as_millis()
                        ));
                    }
                    Err(true) => {
                        // Told it no longer holds the lock.
                        record.lost += 1;
                        end = end.min(Instant::now());
                        released = true;
                        break;
                    }
                    Err(false) => {
                        // The server is gone: as far as this client knows,
                        // its lease runs to its end, and its work goes on
                        // until then (the case fencing exists for).
                        broken = true;
                        work_until = work_until.min(end);
                    }
                }
            }
            let pause = Duration::from_millis(rng.between(50, 250));
            std::thread::sleep(pause.min(end.saturating_duration_since(Instant::now())));
        }
        if broken {
            // It stops believing when it stops working.
            end = end.min(Instant::now());
            story.push_str("lost its server; ");
        } else if !released && rng.percent(85) {
            let release_sent = Instant::now();
            if release_sent < end {
                end = release_sent;
            }
            story.push_str("released");
            let outcome: redis::RedisResult<Value> =
                redis::cmd("DLOCK.RELEASE").arg(key).arg(&owner).query(link);
            if let Err(error) = outcome {
                broken = error.code() != Some("NOTOWNER");
            }
        }
        if end > received {
            record.beliefs.push(Belief {
                key: key_index,
                client: id,
                token,
                start: received,
                end,
                story: format!(
                    "via {master}, {}, sent {:?} before the reply, {story}",
                    if block { "BLOCK" } else { "at once" },
                    received - sent
                ),
            });
        }
        if broken {
            record.errors += 1;
            conn = None;
        }
        std::thread::sleep(Duration::from_millis(rng.between(0, 150)));
    }
    record
}

/// RENEW: Ok, Err(true) when told NOTOWNER, Err(false) on any other error.
fn renew(conn: &mut Connection, key: &str, owner: &str, ttl: &str) -> Result<(), bool> {
    let reply: redis::RedisResult<Value> = redis::cmd("DLOCK.RENEW")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(conn);
    match reply {
        Ok(Value::Int(_)) => Ok(()),
        Ok(_) => Err(false),
        Err(error) => Err(error.code() == Some("NOTOWNER")),
    }
}

/// A connection to the master named by the first Sentinel that answers.
fn find_master(sentinels: &[String]) -> Option<(Connection, String)> {
    for sentinel in sentinels {
        let Ok(mut conn) = connect(sentinel, SENTINEL_PORT, Duration::from_millis(500)) else {
            continue;
        };
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query(&mut conn);
        if let Ok(address) = reply {
            if let [ip, port] = address.as_slice() {
                let port: u16 = port.parse().ok()?;
                return connect(ip, port, Duration::from_secs(3))
                    .ok()
                    .map(|conn| (conn, ip.clone()));
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------
// A run and its report
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct Report {
    scenario: Scenario,
    settings: Settings,
    seconds: u64,
    seed: u64,
    failover: bool,
    lag_bytes: Option<u64>,
    promoted_after: Option<Duration>,
    grants: u64,
    handoffs: u64,
    renewals: u64,
    lost: u64,
    accepted: u64,
    refused: u64,
    out_of_order: u64,
    overlap: Duration,
    overlapping_pairs: u64,
    must_be_zero: bool,
}

fn run(scenario: Scenario, settings: Settings, must_be_zero: bool) -> Option<Report> {
    if let Some(reason) = skip_reason() {
        // Once, and straight to the terminal: the test harness would hide
        // what a passing test prints.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "\n*** PARTITION SUITE SKIPPED: {reason} ***\n\
                 *** (tests/partition.rs proves failover under network partitions; \
                 run it as root on Linux with network namespaces: `make partition`) ***\n"
            );
        });
        return None;
    }
    let seconds = env_number("DLOCK_PARTITION_SECS", 15);
    let seed = seed_from_env("DLOCK_PARTITION_SEED");
    eprintln!(
        "partition scenario {} ({}), {}: {seconds} s, seed {seed}",
        scenario.number(),
        scenario.title(),
        settings.describe()
    );
    let tag = format!(
        "s{}{}",
        scenario.number(),
        if settings.grace { "g" } else { "n" }
    );
    let mut cluster = Cluster::start(&tag, settings, scenario == Scenario::Lag);
    let shared = Arc::new(Shared {
        fences: KEYS.iter().map(|_| Mutex::new(Fence::default())).collect(),
        stop: AtomicBool::new(false),
    });
    let ips = cluster.sentinel_ips();
    let mut handles = Vec::new();
    for id in 0..CLIENTS {
        // Clients 0-7 sit with the master's Sentinel (s1) in a partition.
        let (ns, order) = if id < CLIENTS / 2 {
            (cluster.client_hosts[0].ns.clone(), [0, 1, 2])
        } else {
            (cluster.client_hosts[1].ns.clone(), [1, 2, 0])
        };
        let sentinels: Vec<String> = order.iter().map(|&i| ips[i].clone()).collect();
        let rng = TestRng::fork(seed, id as u64);
        let shared = Arc::clone(&shared);
        handles.push(std::thread::spawn(move || {
            client_loop(id, ns, sentinels, rng, shared)
        }));
    }
    let started = Instant::now();
    let total = Duration::from_secs(seconds);
    let at = |fraction: f64| started + total.mul_f64(fraction);
    // How far behind the promoted replica was when its master died.
    let mut lag_bytes: Option<u64> = None;
    // How long after the cut or the kill Sentinel named a new master.
    let mut promoted_after: Option<Duration> = None;
    let sleep_until = |instant: Instant| {
        let now = Instant::now();
        if instant > now {
            std::thread::sleep(instant - now);
        }
    };
    match scenario {
        Scenario::Partition => {
            sleep_until(at(0.15));
            let minority = [
                &cluster.server_hosts[0],
                &cluster.sentinel_hosts[0],
                &cluster.client_hosts[0],
            ];
            cluster.net.partition(&minority);
            promoted_after = cluster.wait_for_promotion(Instant::now(), at(0.8));
            sleep_until(at(0.8));
            cluster.net.heal();
        }
        Scenario::Kill => {
            // Every 15 s: kill, restart 300 ms later like a supervisor
            // would (long before Sentinel's down-after: the same server
            // comes back as master).
            let mut kill_at = started + Duration::from_secs(4);
            while kill_at + Duration::from_secs(4) <= started + total {
                sleep_until(kill_at);
                cluster.servers[0].kill();
                std::thread::sleep(Duration::from_millis(300));
                cluster.servers[0].restart();
                kill_at += Duration::from_secs(15);
            }
        }
        Scenario::Lag => {
            sleep_until(at(0.1));
            let lagging = cluster.server_hosts[1].clone();
            let slow_port = match &cluster.side_link {
                Some(link) => link.b_port.clone(),
                None => panic!("the lag scenario has a side link"),
            };
            cluster.net.slow_down(&slow_port, "4kbit", "800ms");
            sleep_until(at(0.35));
            let offset = |host: &Host, field: &str| -> Option<u64> {
                let text = cluster.info_text(host, "replication");
                text.lines()
                    .find_map(|line| line.strip_prefix(field))
                    .and_then(|value| value.trim().parse().ok())
            };
            let master_offset = offset(&cluster.server_hosts[0], "master_repl_offset:");
            let replica_offset = offset(&lagging, "slave_repl_offset:");
            if let (Some(master), Some(replica)) = (master_offset, replica_offset) {
                lag_bytes = Some(master.saturating_sub(replica));
            }
            cluster.servers[0].kill();
            cluster.net.restore(&slow_port);
            promoted_after = cluster.wait_for_promotion(Instant::now(), at(0.75));
            sleep_until(at(0.75));
            // The old master comes back; Sentinel turns it into a replica.
            cluster.servers[0].restart();
        }
    }
    sleep_until(started + total);
    shared.stop.store(true, Ordering::Relaxed);
    let records: Vec<ClientRecord> = handles
        .into_iter()
        .map(|h| h.join().expect("a client thread panicked"))
        .collect();
    let master_ip = &cluster.server_hosts[0].ip;
    let failover = (1..3).any(|i| cluster.master_by(i).is_some_and(|ip| &ip != master_ip));

    let mut report = Report {
        scenario,
        settings,
        seconds,
        seed,
        failover,
        lag_bytes,
        promoted_after,
        grants: records.iter().map(|r| r.grants).sum(),
        handoffs: records.iter().map(|r| r.handoffs).sum(),
        renewals: records.iter().map(|r| r.renewals).sum(),
        lost: records.iter().map(|r| r.lost).sum(),
        accepted: 0,
        refused: 0,
        out_of_order: 0,
        overlap: Duration::ZERO,
        overlapping_pairs: 0,
        must_be_zero,
    };
    for fence in &shared.fences {
        let fence = fence.lock().expect("fence");
        report.accepted += fence.accepted.len() as u64;
        report.refused += fence.refused;
        report.out_of_order += fence.accepted.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    }
    let beliefs: Vec<&Belief> = records.iter().flat_map(|r| &r.beliefs).collect();
    if std::env::var_os("DLOCK_PARTITION_TRACE").is_some() {
        let mut sorted = beliefs.clone();
        sorted.sort_by_key(|b| (b.key, b.start));
        for b in sorted {
            eprintln!(
                "{} client {:2} token {} believed {:6}..{:6} ms",
                KEYS[b.key],
                b.client,
                b.token,
                b.start.saturating_duration_since(started).as_millis(),
                b.end.saturating_duration_since(started).as_millis()
            );
        }
    }
    let mut worst: Option<(Belief, Belief)> = None;
    for key in 0..KEYS.len() {
        let mut of_key: Vec<&Belief> = beliefs.iter().copied().filter(|b| b.key == key).collect();
        of_key.sort_by_key(|b| b.start);
        for (i, a) in of_key.iter().enumerate() {
            for b in &of_key[i + 1..] {
                if b.start >= a.end {
                    break;
                }
                if a.client == b.client {
                    continue;
                }
                let overlap = a.end.min(b.end) - b.start;
                if overlap > Duration::ZERO {
                    report.overlapping_pairs += 1;
                    if overlap > report.overlap {
                        report.overlap = overlap;
                        worst = Some(((*a).clone(), (*b).clone()));
                    }
                }
            }
        }
    }
    eprintln!("seed {}: {report:?}", report.seed);
    if let Some((a, b)) = &worst {
        eprintln!(
            "longest overlap on {}: client {} token {} [{:?}..{:?}] ({}) and client {} token {} [{:?}..{:?}] ({}) (ms from start)",
            KEYS[a.key],
            a.client,
            a.token,
            a.start.saturating_duration_since(started).as_millis(),
            a.end.saturating_duration_since(started).as_millis(),
            a.story,
            b.client,
            b.token,
            b.start.saturating_duration_since(started).as_millis(),
            b.end.saturating_duration_since(started).as_millis(),
            b.story
        );
    }
    write_report_row(&report);
    assert_eq!(
        report.out_of_order, 0,
        "the fenced resource accepted a write out of token order"
    );
    assert!(report.grants > 0, "no lock was granted at all");
    if scenario != Scenario::Kill {
        cluster.assert_that(failover, "Sentinel promoted a replica");
    }
    if must_be_zero {
        assert_eq!(
            report.overlap,
            Duration::ZERO,
            "two clients believed they held the same lock at once ({} pairs)",
            report.overlapping_pairs
        );
    }
    Some(report)
}

fn skip_reason() -> Option<String> {
    if std::env::var_os("DLOCK_SERVER").is_some()
        && std::env::var("DLOCK_PARTITION").ok().as_deref() != Some("1")
    {
        return Some(
            "DLOCK_SERVER is set (the Valkey pass of `make test`); set DLOCK_PARTITION=1 \
             to run the partition suite against it"
                .to_string(),
        );
    }
    if !cfg!(target_os = "linux") {
        return Some("network namespaces need Linux".to_string());
    }
    Net::unavailable().map(|why| format!("this machine cannot make network namespaces: {why}"))
}

// ---------------------------------------------------------------------------
// The generated table in docs/reliability.md
// ---------------------------------------------------------------------------

const BEGIN: &str = "<!-- partition-results:begin (written by tests/partition.rs) -->";
const END: &str = "<!-- partition-results:end -->";
const HEADER: &str = "| scenario | settings | run | failover | grants | hand-offs | renewals / lost | fenced writes accepted / refused | out of order | overlap | check |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |";

static REPORT_LOCK: Mutex<()> = Mutex::new(());

/// "yes, 5.3 s after the cut, the replica 2453 bytes behind" and the like.
fn failover_text(report: &Report) -> String {
    if !report.failover {
        return "no".to_string();
    }
    let mut text = "yes".to_string();
    if let Some(after) = report.promoted_after {
        let event = match report.scenario {
            Scenario::Partition => "cut",
            _ => "kill",
        };
        text.push_str(&format!(", {:.1} s after the {event}", after.as_secs_f64()));
    }
    if let Some(lag) = report.lag_bytes {
        text.push_str(&format!(", replica {lag} bytes behind"));
    }
    text
}

/// `DLOCK_PARTITION_REPORT`, else docs/reliability.md for a run whose length
/// was chosen (`make partition`), else target/partition-report.md (the short
/// run of `make test` leaves the docs alone, like the quick bench).
fn report_path() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var("DLOCK_PARTITION_REPORT") {
        Ok(path) => PathBuf::from(path),
        Err(_) if std::env::var_os("DLOCK_PARTITION_SECS").is_some() => {
            root.join("docs/reliability.md")
        }
        Err(_) => root.join("target/partition-report.md"),
    }
}

/// Replaces this scenario and settings' row of the generated table (other
/// rows stay, so that running one test updates only its own).
fn write_report_row(report: &Report) {
    let _guard = REPORT_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let label = format!("{}. {}", report.scenario.number(), report.scenario.title());
    let settings = report.settings.describe();
    let row = format!(
        "| {label} | {settings} | {} s | {} | {} | {} | {} / {} | {} / {} | {} | {} ms ({} pairs) | {} |",
        report.seconds,
        failover_text(report),
        report.grants,
        report.handoffs,
        report.renewals,
        report.lost,
        report.accepted,
        report.refused,
        report.out_of_order,
        report.overlap.as_millis(),
        report.overlapping_pairs,
        if report.must_be_zero {
            "overlap must be 0"
        } else {
            "reported"
        }
    );
    let path = report_path();
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let (before, rows, after) = match (text.find(BEGIN), text.find(END)) {
        (Some(begin), Some(end)) if begin < end => {
            let inner = &text[begin + BEGIN.len()..end];
            let rows: Vec<String> = inner
                .lines()
                .filter(|line| {
                    line.starts_with("| ")
                        && !line.starts_with("| scenario")
                        && !line.starts_with("| ---")
                })
                .map(str::to_string)
                .collect();
            (
                text[..begin].to_string(),
                rows,
                text[end + END.len()..].to_string(),
            )
        }
        _ => (format!("{text}\n"), Vec::new(), "\n".to_string()),
    };
    let prefix = format!("| {label} | {settings} |");
    let mut rows: Vec<String> = rows
        .into_iter()
        .filter(|r| !r.starts_with(&prefix))
        .collect();
    rows.push(row);
    rows.sort();
    let table = format!("{BEGIN}\n{HEADER}\n{}\n{END}", rows.join("\n"));
    match std::fs::write(&path, format!("{before}{table}{after}")) {
        Ok(()) => eprintln!("figures written to {}", path.display()),
        Err(error) => eprintln!("could not write {}: {error}", path.display()),
    }
}

// ---------------------------------------------------------------------------
// The scenarios
// ---------------------------------------------------------------------------

const AOF_MIN_REPLICAS: Settings = Settings {
    grace: false,
    aof: Some("everysec"),
    min_replicas: true,
};

#[test]
fn s1_partition_without_grace_window() {
    run(Scenario::Partition, AOF_MIN_REPLICAS, false);
}

#[test]
fn s2_kill_without_persistence_without_grace_window() {
    let settings = Settings {
        grace: false,
        aof: None,
        min_replicas: false,
    };
    run(Scenario::Kill, settings, false);
}

#[test]
fn s2_kill_with_aof_without_grace_window() {
    let settings = Settings {
        grace: false,
        aof: Some("everysec"),
        min_replicas: false,
    };
    run(Scenario::Kill, settings, false);
}

/// AOF, no min-replicas-to-write: a killed master grants nothing, so the
/// window alone decides.
const LAG_SETTINGS: Settings = Settings {
    grace: false,
    aof: Some("everysec"),
    min_replicas: false,
};

#[test]
fn s3_lagging_replica_without_grace_window() {
    run(Scenario::Lag, LAG_SETTINGS, false);
}

const GRACE_AOF_MIN_REPLICAS: Settings = Settings {
    grace: true,
    aof: Some("everysec"),
    min_replicas: true,
};

#[test]
fn s1_partition_with_grace_window() {
    run(Scenario::Partition, GRACE_AOF_MIN_REPLICAS, true);
}

/// Without min-replicas-to-write the old master goes on granting to the
/// clients on its side for the whole partition: no window can help (the
/// overlap is reported; docs/operations.md says which settings it needs).
#[test]
fn s1_partition_with_grace_window_without_min_replicas() {
    let settings = Settings {
        min_replicas: false,
        ..GRACE_AOF_MIN_REPLICAS
    };
    run(Scenario::Partition, settings, false);
}

#[test]
fn s2_kill_with_aof_with_grace_window() {
    let settings = Settings {
        min_replicas: false,
        ..GRACE_AOF_MIN_REPLICAS
    };
    run(Scenario::Kill, settings, true);
}

#[test]
fn s2_kill_without_persistence_with_grace_window() {
    let settings = Settings {
        grace: true,
        aof: None,
        min_replicas: false,
    };
    run(Scenario::Kill, settings, true);
}

#[test]
fn s3_lagging_replica_with_grace_window() {
    let settings = Settings {
        grace: true,
        ..LAG_SETTINGS
    };
    run(Scenario::Lag, settings, false);
}
