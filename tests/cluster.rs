//! Redis Cluster: three masters with one replica each, built with
//! `redis-cli --cluster create` from real servers, driven through the
//! cluster-aware client of the `redis` crate.
//!
//! * every `DLOCK.*` command routes on its key: locks spread over every
//!   master, a node that does not serve the slot answers `MOVED`, and a
//!   client with a stale slot map follows the redirection (also after a
//!   slot is resharded with the lock in it, when a `DLOCK.WATCH` waiting
//!   on the old master is redirected too);
//! * BLOCKed waiters get the lock on release and on lease expiry on every
//!   shard, and hash-tagged locks (`{order:42}:payment`,
//!   `{order:42}:stock`) share a slot, so one script can take them together;
//! * a failover, manual (`CLUSTER FAILOVER`) or forced by killing the
//!   master, keeps every lock acknowledged by `WAIT`, with the same owner,
//!   holds and token, and the promoted replica issues larger tokens than
//!   any its old master issued; a waiter blocked on a demoted master is
//!   answered at once.
//! * a lock resharded away (MIGRATE) while a waiter blocks on it is not
//!   granted again on the old master: the waiter is answered null.
//! * shared holds (readers, a writer waiting for them, a semaphore handed
//!   on at a lease deadline) work on every shard and reach its replica.
//!
//! Each test builds its own cluster (six servers, killed on drop). The
//! cluster is created with `redis-cli` (`DLOCK_REDIS_CLI` overrides the
//! binary), which also works against valkey-server. Nothing sleeps for a
//! fixed time: every step polls for the state it needs, with a deadline.

use crate::common;
use crate::sharedkit;

use common::*;
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::ConnectionLike;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a cluster gets to form, or to settle after a failover.
const CLUSTER_PATIENCE: Duration = Duration::from_secs(30);

/// `cluster-node-timeout`: a killed master is declared failed after this.
const NODE_TIMEOUT_MS: &str = "2000";

/// Reads on client connections give up after this (a test fails, never hangs).
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Lease of locks that must outlive the test.
const LONG_TTL: u64 = 600_000;

/// Number of hash slots.
const SLOTS: u32 = 16384;

// ---------------------------------------------------------------------------
// Commands over any connection (plain or cluster).
// ---------------------------------------------------------------------------

/// Runs a command given as strings on any connection.
fn exec(conn: &mut impl ConnectionLike, args: &[&str]) -> redis::RedisResult<Value> {
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query(conn)
}

fn exec_int(conn: &mut impl ConnectionLike, args: &[&str]) -> i64 {
    match exec(conn, args) {
        Ok(Value::Int(value)) => value,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

/// `DLOCK.ACQUIRE key owner ttl` as a grant `[token, holds, owner]`.
fn take(
    conn: &mut impl ConnectionLike,
    key: &str,
    owner: &str,
    ttl: u64,
) -> Option<(i64, i64, Vec<u8>)> {
    let reply = exec(conn, &["DLOCK.ACQUIRE", key, owner, &ttl.to_string()])
        .unwrap_or_else(|e| panic!("DLOCK.ACQUIRE {key} {owner}: {e}"));
    grant(reply)
}

/// `DLOCK.RELEASE key owner`: the holds left.
fn give_back(conn: &mut impl ConnectionLike, key: &str, owner: &str) -> i64 {
    exec_int(conn, &["DLOCK.RELEASE", key, owner])
}

/// A lock as `DLOCK.INFO` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LockView {
    owner: Option<String>,
    holds: i64,
    token: i64,
    pttl: i64,
    waiting: i64,
}

impl LockView {
    /// The parts a failover must keep (the lease keeps running).
    fn hold(&self) -> (Option<String>, i64, i64) {
        (self.owner.clone(), self.holds, self.token)
    }
}

/// `DLOCK.INFO key` (RESP2), None when the key does not exist.
fn try_view(conn: &mut impl ConnectionLike, key: &str) -> redis::RedisResult<Option<LockView>> {
    let items = match exec(conn, &["DLOCK.INFO", key])? {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        other => panic!("not an INFO reply: {other:?}"),
    };
    let mut fields: HashMap<String, Value> = HashMap::new();
    for pair in items.chunks(2) {
        let name = match &pair[0] {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("not a field name: {other:?}"),
        };
        fields.insert(name, pair[1].clone());
    }
    let number = |name: &str| match fields.get(name) {
        Some(Value::Int(value)) => *value,
        other => panic!("field {name} of {key}: {other:?}"),
    };
    let owner = match fields.get("owner") {
        Some(Value::BulkString(owner)) => Some(String::from_utf8_lossy(owner).into_owned()),
        Some(Value::Nil) => None,
        other => panic!("owner of {key}: {other:?}"),
    };
    Ok(Some(LockView {
        owner,
        holds: number("holds"),
        token: number("token"),
        pttl: number("pttl"),
        waiting: number("waiting"),
    }))
}

fn view(conn: &mut impl ConnectionLike, key: &str) -> Option<LockView> {
    try_view(conn, key).unwrap_or_else(|e| panic!("DLOCK.INFO {key}: {e}"))
}

/// Polls until `key` has `n` waiters.
fn wait_for_waiters(conn: &mut impl ConnectionLike, key: &str, n: i64) {
    wait_until(&format!("{key} to have {n} waiting"), || {
        view(conn, key).is_some_and(|lock| lock.waiting == n)
    });
}

/// Polls until the latch `key` has `n` clients blocked in DLOCK.AWAIT
/// (`waiting`, field 5 of its DLOCK.INFO).
fn wait_for_awaiters(conn: &mut impl ConnectionLike, key: &str, n: i64) {
    wait_until(&format!("{key} to have {n} awaiting"), || {
        matches!(
            exec(conn, &["DLOCK.INFO", key]),
            Ok(Value::Array(fields)) if fields.get(5) == Some(&Value::Int(n))
        )
    });
}

/// `CLUSTER KEYSLOT key`.
fn keyslot(conn: &mut impl ConnectionLike, key: &str) -> u16 {
    let slot = exec_int(conn, &["CLUSTER", "KEYSLOT", key]);
    u16::try_from(slot).expect("a slot number")
}

/// `WAIT replicas timeout`: how many replicas acknowledged.
fn wait_replicas(conn: &mut Connection, replicas: i64, timeout_ms: i64) -> i64 {
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(timeout_ms)
        .query(conn)
        .expect("WAIT")
}

/// The `MOVED slot host:port` redirection of a command that must be refused.
fn moved(conn: &mut Connection, args: &[&str]) -> (u16, String) {
    match exec(conn, args) {
        Err(error) => {
            assert_eq!(
                error.code(),
                Some("MOVED"),
                "{args:?} should answer MOVED: {error}"
            );
            let (addr, slot) = error
                .redirect_node()
                .unwrap_or_else(|| panic!("MOVED without a target: {error}"));
            (slot, addr.to_string())
        }
        Ok(value) => panic!("{args:?} should answer MOVED but replied {value:?}"),
    }
}

// ---------------------------------------------------------------------------
// The cluster.
// ---------------------------------------------------------------------------

/// One node's line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: Option<String>,
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn failing(&self) -> bool {
        self.has_flag("fail") || self.has_flag("fail?") || self.has_flag("handshake")
    }

    fn is_master(&self) -> bool {
        self.has_flag("master") && !self.failing()
    }

    fn is_replica(&self) -> bool {
        (self.has_flag("slave") || self.has_flag("replica")) && !self.failing()
    }
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() >= 8, "not a CLUSTER NODES line: {line}");
            // ip:port@cport[,hostname]
            let address = fields[1].split(['@', ',']).next().unwrap_or_default();
            let port = address
                .rsplit(':')
                .next()
                .and_then(|port| port.parse().ok())
                .unwrap_or_else(|| panic!("no port in {line}"));
            let slots = fields[8..]
                .iter()
                .filter(|range| !range.starts_with('['))
                .map(|range| match range.split_once('-') {
                    Some((low, high)) => (low.parse().unwrap(), high.parse().unwrap()),
                    None => {
                        let slot = range.parse().unwrap();
                        (slot, slot)
                    }
                })
                .collect();
            NodeLine {
                id: fields[0].to_string(),
                port,
                flags: fields[2].split(',').map(str::to_string).collect(),
                master_id: (fields[3] != "-").then(|| fields[3].to_string()),
                slots,
            }
        })
        .collect()
}

/// A master, the slots it serves and its live replica (if any).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shard {
    master: u16,
    replica: Option<u16>,
    slots: Vec<(u16, u16)>,
}

impl Shard {
    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|(low, high)| (*low..=*high).contains(&slot))
    }

    fn replica(&self) -> u16 {
        self.replica.expect("the shard has a replica")
    }
}

/// Six servers in cluster mode: three masters, three replicas.
struct Cluster {
    servers: Vec<Server>,
    killed: HashSet<u16>,
}

fn redis_cli() -> String {
    std::env::var("DLOCK_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string())
}

impl Cluster {
    /// Starts six nodes, joins them with `redis-cli --cluster create` (one
    /// replica per master) and waits until every node agrees and is healthy.
    fn start() -> Cluster {
        let servers: Vec<Server> = (0..6)
            .map(|_| Server::cluster_node(NODE_TIMEOUT_MS))
            .collect();
        let addresses: Vec<String> = servers
            .iter()
            .map(|server| format!("127.0.0.1:{}", server.port))
            .collect();
        let cli = redis_cli();
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run `{cli}` ({error}): the cluster tests create their cluster \
                     with `redis-cli --cluster create`; install redis-tools (or redis-server), \
                     or set DLOCK_REDIS_CLI to a compatible redis-cli"
                )
            });
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("All 16384 slots covered"),
            "`{cli} --cluster create` failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Cluster {
            servers,
            killed: HashSet::new(),
        };
        cluster.settled("the new cluster", |shards| {
            shards.iter().all(|shard| shard.replica.is_some())
        });
        cluster
    }

    fn live_ports(&self) -> Vec<u16> {
        self.servers
            .iter()
            .map(|server| server.port)
            .filter(|port| !self.killed.contains(port))
            .collect()
    }

    /// A plain (not cluster-aware) connection to one node.
    fn node(&self, port: u16) -> Connection {
        connect_port(port, READ_TIMEOUT)
    }

    /// A cluster-aware connection seeded with every live node.
    fn client(&self) -> ClusterConnection {
        cluster_connection(&self.cluster_client())
    }

    fn cluster_client(&self) -> ClusterClient {
        let nodes: Vec<String> = self
            .live_ports()
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}/"))
            .collect();
        ClusterClient::new(nodes).expect("cluster client")
    }

    /// Kills the node on `port` (SIGKILL), as a crash would.
    fn kill(&mut self, port: u16) {
        let server = self
            .servers
            .iter_mut()
            .find(|server| server.port == port)
            .expect("a node of this cluster");
        server.kill();
        self.killed.insert(port);
    }

    /// Waits until every live node reports `cluster_state:ok`, all of them
    /// agree on the masters, their slots and their live replicas, three
    /// masters serve all slots, every replica's link to its master is up,
    /// and `also` holds; returns the shards (ordered by first slot).
    fn settled(&self, what: &str, also: impl Fn(&[Shard]) -> bool) -> Vec<Shard> {
        let deadline = Instant::now() + CLUSTER_PATIENCE;
        let mut conns: HashMap<u16, Connection> = HashMap::new();
        loop {
            let last_seen = match self.agreed_shards(&mut conns) {
                Ok(shards) if also(&shards) => return shards,
                Ok(shards) => format!("{shards:?}"),
                Err(why) => why,
            };
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} to settle; last seen: {last_seen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn agreed_shards(&self, conns: &mut HashMap<u16, Connection>) -> Result<Vec<Shard>, String> {
        let live = self.live_ports();
        let mut agreed: Option<Vec<Shard>> = None;
        for &port in &live {
            let conn = match conns.entry(port) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => entry.insert(
                    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                        .and_then(|client| {
                            client.get_connection_with_timeout(Duration::from_secs(1))
                        })
                        .map_err(|e| format!("connect to {port}: {e}"))?,
                ),
            };
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(conn)
                .map_err(|e| format!("CLUSTER INFO on {port}: {e}"))?;
            if !info.lines().any(|line| line.trim() == "cluster_state:ok") {
                return Err(format!("{port} is not ok:\n{info}"));
            }
            let text: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(conn)
                .map_err(|e| format!("CLUSTER NODES on {port}: {e}"))?;
            let shards = shards_of(&parse_nodes(&text), &live);
            let served: u32 = shards
                .iter()
                .flat_map(|shard| shard.slots.iter())
                .map(|(low, high)| u32::from(high - low) + 1)
                .sum();
            if shards.len() != 3 || served != SLOTS {
                return Err(format!("{port} sees {shards:?}"));
            }
            match &agreed {
                None => agreed = Some(shards),
                Some(seen) if *seen == shards => {}
                Some(seen) => return Err(format!("{port} sees {shards:?}, another {seen:?}")),
            }
        }
        let shards = agreed.ok_or("no live node")?;
        for shard in &shards {
            if let Some(replica) = shard.replica {
                let conn = conns.get_mut(&replica).expect("a live node");
                let text: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(conn)
                    .map_err(|e| format!("INFO on {replica}: {e}"))?;
                let wanted = format!("master_port:{}", shard.master);
                let lines: Vec<&str> = text.lines().map(str::trim).collect();
                if !lines.contains(&"master_link_status:up") || !lines.contains(&wanted.as_str()) {
                    return Err(format!(
                        "replica {replica} is not linked to {}",
                        shard.master
                    ));
                }
            }
        }
        Ok(shards)
    }
}

/// The shards in one node's view: its healthy masters that serve slots, each
/// with its healthy replica among the live nodes.
fn shards_of(nodes: &[NodeLine], live: &[u16]) -> Vec<Shard> {
    let mut shards: Vec<Shard> = nodes
        .iter()
        .filter(|node| node.is_master() && !node.slots.is_empty())
        .map(|master| {
            let mut slots = master.slots.clone();
            slots.sort_unstable();
            let replicas: Vec<u16> = nodes
                .iter()
                .filter(|node| {
                    node.is_replica()
                        && node.master_id.as_deref() == Some(&master.id)
                        && live.contains(&node.port)
                })
                .map(|node| node.port)
                .collect();
            Shard {
                master: master.port,
                replica: match replicas.as_slice() {
                    [one] => Some(*one),
                    _ => None,
                },
                slots,
            }
        })
        .collect();
    shards.sort_by_key(|shard| shard.slots.first().copied());
    shards
}

fn cluster_connection(client: &ClusterClient) -> ClusterConnection {
    let conn = client.get_connection().expect("connect to the cluster");
    conn.set_read_timeout(Some(READ_TIMEOUT))
        .expect("set the read timeout");
    conn
}

/// `n` keys `prefix:i` (the first that qualify) whose slots `shard` serves.
fn keys_on(conn: &mut impl ConnectionLike, shard: &Shard, prefix: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .filter(|key| shard.serves(keyslot(conn, key)))
        .take(n)
        .collect()
}

/// A hash tag (`{...}`) whose slot `shard` serves.
fn tag_on(conn: &mut impl ConnectionLike, shard: &Shard, prefix: &str) -> String {
    let tag = keys_on(conn, shard, prefix, 1).remove(0);
    format!("{{{tag}}}")
}

/// A command running on its own cluster connection in its own thread (it
/// may block); yields the reply and the wall-clock ms when it came.
struct Waiter {
    handle: JoinHandle<(redis::RedisResult<Value>, i64)>,
}

impl Waiter {
    fn spawn(client: &ClusterClient, args: &[&str]) -> Waiter {
        let client = client.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let handle = std::thread::spawn(move || {
            let mut conn = cluster_connection(&client);
            let strs: Vec<&str> = args.iter().map(String::as_str).collect();
            let reply = exec(&mut conn, &strs);
            (reply, now_ms())
        });
        Waiter { handle }
    }

    /// Waits for the reply, which must be a grant; returns it and when it came.
    fn granted(self) -> ((i64, i64, Vec<u8>), i64) {
        let (reply, at) = self.handle.join().expect("the waiter thread panicked");
        let reply = reply.expect("the blocked acquire failed");
        (grant(reply).expect("the waiter got null, not the lock"), at)
    }
}

/// A lock with an ever-increasing token far above the wall clock (so that
/// only the token counter, never the clock floor, makes later tokens larger):
/// `DUMP` of the `seed` lock of a standalone server whose AOF starts its
/// counter at `token`.
fn seed_payload(token: u64) -> Vec<u8> {
    let aof = aof_with_token(token);
    let server = Server::with_files(
        &[("appendonly.aof", &aof)],
        &["--save", "", "--appendonly", "yes"],
    );
    let mut conn = server.connect();
    assert_eq!(info_int(&mut conn, "seed", "token"), token as i64);
    redis::cmd("DUMP")
        .arg("seed")
        .query(&mut conn)
        .expect("DUMP seed")
}

/// Moves `slot` (and `keys`, all of it) from the master serving it to
/// `target`, as `redis-cli --cluster reshard` does: IMPORTING / MIGRATING,
/// MIGRATE (which carries a lock in its RDB encoding), then SETSLOT NODE on
/// every master; waits until the whole cluster agrees.
fn reshard(cluster: &Cluster, shards: &[Shard], slot: u16, keys: &[&str], target: u16) {
    reshard_with(cluster, shards, slot, keys, target, || {});
}

/// [`reshard`], running `migrated` after MIGRATE, before SETSLOT NODE.
fn reshard_with(
    cluster: &Cluster,
    shards: &[Shard],
    slot: u16,
    keys: &[&str],
    target: u16,
    migrated: impl FnOnce(),
) {
    let source = shards.iter().find(|s| s.serves(slot)).unwrap().master;
    let mut from = cluster.node(source);
    let mut to = cluster.node(target);
    let id_of = |conn: &mut Connection| -> String {
        redis::cmd("CLUSTER").arg("MYID").query(conn).unwrap()
    };
    let (source_id, target_id) = (id_of(&mut from), id_of(&mut to));
    let setslot = |conn: &mut Connection, state: &str, node: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(node)
            .query(conn)
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state}: {e}"));
    };
    setslot(&mut to, "IMPORTING", &source_id);
    setslot(&mut from, "MIGRATING", &target_id);
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(keys)
        .query(&mut from)
        .expect("MIGRATE");
    migrated();
    setslot(&mut to, "NODE", &target_id);
    setslot(&mut from, "NODE", &target_id);
    for shard in shards
        .iter()
        .filter(|s| s.master != source && s.master != target)
    {
        setslot(&mut cluster.node(shard.master), "NODE", &target_id);
    }
    cluster.settled("the resharded cluster", |now| {
        now.iter()
            .all(|shard| shard.serves(slot) == (shard.master == target))
    });
}

// ---------------------------------------------------------------------------
// Routing.
// ---------------------------------------------------------------------------

#[test]
fn locks_spread_over_every_master_and_other_nodes_answer_moved() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let mut client = cluster.client();
    let mut any = cluster.node(shards[0].master);

    // 300 locks through the cluster client.
    let keys: Vec<String> = (0..300).map(|i| format!("lock:{i}")).collect();
    let mut tokens: HashMap<String, i64> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let owner = format!("owner-{i}");
        let (token, holds, granted) = take(&mut client, key, &owner, LONG_TTL).unwrap();
        assert_eq!((holds, granted), (1, owner.into_bytes()));
        tokens.insert(key.clone(), token);
    }

    // Each lives on the master that serves its slot, and only there.
    let mut per_master: HashMap<u16, i64> = HashMap::new();
    for key in &keys {
        let slot = keyslot(&mut any, key);
        let shard = shards.iter().find(|s| s.serves(slot)).unwrap();
        *per_master.entry(shard.master).or_default() += 1;
        let mut master = cluster.node(shard.master);
        let lock = view(&mut master, key).unwrap_or_else(|| panic!("{key} is not on its master"));
        assert_eq!(lock.token, tokens[key]);
        let typed: String = redis::cmd("TYPE").arg(key).query(&mut master).unwrap();
        assert_eq!(typed, "dlocklock");
    }
    for shard in &shards {
        let mut master = cluster.node(shard.master);
        let dbsize = exec_int(&mut master, &["DBSIZE"]);
        assert!(dbsize > 0, "master {} got no lock", shard.master);
        assert_eq!(dbsize, per_master[&shard.master], "master {}", shard.master);
        // ... and reaches its replica.
        assert_eq!(wait_replicas(&mut master, 1, 5_000), 1);
        let mut replica = cluster.node(shard.replica());
        assert_eq!(exec_int(&mut replica, &["DBSIZE"]), dbsize);
    }
    assert_eq!(per_master.values().sum::<i64>(), 300);

    // Every command on a node that does not serve the key: MOVED to the
    // master that does, and nothing changes.
    let key = keys[0].as_str();
    let slot = keyslot(&mut any, key);
    let home = shards.iter().find(|s| s.serves(slot)).unwrap();
    let other = shards.iter().find(|s| !s.serves(slot)).unwrap();
    let home_address = format!("127.0.0.1:{}", home.master);
    let mut wrong = cluster.node(other.master);
    for args in [
        vec!["DLOCK.ACQUIRE", key, "intruder", "1000"],
        vec!["DLOCK.ACQUIRE", key, "owner-0", "1000", "BLOCK", "100"],
        vec!["DLOCK.RELEASE", key, "owner-0"],
        vec!["DLOCK.RENEW", key, "owner-0", "1000"],
        vec!["DLOCK.INFO", key],
        vec!["DLOCK.FAIR", key, "intruder", "1000"],
        vec!["DLOCK.WATCH", key, "0", "100"],
    ] {
        assert_eq!(moved(&mut wrong, &args), (slot, home_address.clone()));
    }
    // The home master's replica redirects writes to its master, and serves
    // DLOCK.INFO (read-only) after READONLY.
    let mut replica = cluster.node(home.replica());
    assert_eq!(
        moved(&mut replica, &["DLOCK.ACQUIRE", key, "intruder", "1000"]),
        (slot, home_address.clone())
    );
    assert_eq!(
        moved(&mut replica, &["DLOCK.RELEASE", key, "owner-0"]),
        (slot, home_address)
    );
    let _: () = redis::cmd("READONLY").query(&mut replica).unwrap();
    let on_replica = view(&mut replica, key).expect("the replica serves DLOCK.INFO");
    assert_eq!(on_replica.owner.as_deref(), Some("owner-0"));
    assert_eq!((on_replica.holds, on_replica.token), (1, tokens[key]));
    // A follower may watch the replica: a token it does not know there is
    // answered at once with the holder (DLOCK.WATCH is read-only).
    match exec(&mut replica, &["DLOCK.WATCH", key, "0", "100"]).unwrap() {
        Value::Array(state) => assert_eq!(state[0], Value::Int(tokens[key])),
        other => panic!("DLOCK.WATCH on the replica replied {other:?}"),
    }
    let mut home_master = cluster.node(home.master);
    let lock = view(&mut home_master, key).unwrap();
    assert_eq!(lock.hold(), (Some("owner-0".to_string()), 1, tokens[key]));

    // Through the cluster client everything works: renew, another owner is
    // refused, release frees every lock.
    for (i, key) in keys.iter().enumerate() {
        let owner = format!("owner-{i}");
        assert_eq!(
            exec_int(&mut client, &["DLOCK.RENEW", key, &owner, "700000"]),
            tokens[key]
        );
        assert_eq!(take(&mut client, key, "intruder", 1000), None);
        assert_eq!(give_back(&mut client, key, &owner), 0);
    }
    for shard in &shards {
        assert_eq!(exec_int(&mut cluster.node(shard.master), &["DBSIZE"]), 0);
    }
}

#[test]
fn a_resharded_lock_keeps_its_state_and_a_stale_client_follows_moved() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let mut client = cluster.client();
    let (source, target) = (&shards[0], &shards[1]);
    let mut from = cluster.node(source.master);
    let mut to = cluster.node(target.master);
    let tag = tag_on(&mut from, source, "move");
    let key = format!("{tag}:lock");
    let slot = keyslot(&mut from, &key);

    let (token, _, _) = take(&mut client, &key, "holder", LONG_TTL).unwrap();
    assert_eq!(take(&mut client, &key, "holder", LONG_TTL).unwrap().1, 2);
    let before = view(&mut client, &key).unwrap();
    let expire_at = pexpiretime(&mut from, &key);
    // A follower watching a free key of the slot on the old master (a
    // plain connection, which does not follow redirects).
    let free_key = format!("{tag}:free");
    let mut follower = cluster.node(source.master);
    let watching =
        std::thread::spawn(move || exec(&mut follower, &["DLOCK.WATCH", &free_key, "0", "0"]));
    wait_until("the follower to watch on the old master", || {
        info_field(&mut from, "dlock", "dlock_watchers") == "1"
    });

    // Move the slot to the target master, the lock with it.
    reshard(&cluster, &shards, slot, &[&key], target.master);

    // The follower would wait forever on a node that no longer serves its
    // key: the old master redirects it, as it does a BLPOP.
    match watching.join().expect("the follower thread panicked") {
        Err(error) => assert_eq!(error.code(), Some("MOVED"), "{error}"),
        Ok(value) => panic!("the follower of a key whose slot moved got {value:?}, not MOVED"),
    }

    // The old master redirects, the new one holds the very same lock.
    assert_eq!(
        moved(&mut from, &["DLOCK.INFO", &key]),
        (slot, format!("127.0.0.1:{}", target.master))
    );
    assert_eq!(exec_int(&mut from, &["DBSIZE"]), 0);
    let there = view(&mut to, &key).expect("the lock moved with its slot");
    assert_eq!(there.hold(), before.hold());
    assert!(there.pttl > 0 && there.pttl <= before.pttl, "{there:?}");
    // MIGRATE carries the key's expire as a relative TTL: it may end a little
    // later than the lease (harmless: the lock is free after its deadline
    // anyway), never earlier.
    let moved_expire = pexpiretime(&mut to, &key);
    assert!(
        (expire_at..expire_at + 1_000).contains(&moved_expire),
        "the key expires at {moved_expire}, the lease at {expire_at}"
    );

    // The client still has the old slot map: it follows MOVED.
    let followed = view(&mut client, &key).expect("the client found the lock");
    assert_eq!(followed.hold(), (Some("holder".to_string()), 2, token));
    assert_eq!(take(&mut client, &key, "intruder", 1000), None);
    assert_eq!(give_back(&mut client, &key, "holder"), 1);
    assert_eq!(give_back(&mut client, &key, "holder"), 0);
    assert_eq!(exec_int(&mut to, &["EXISTS", &key]), 0);
    let (next, _, _) = take(&mut client, &key, "next", LONG_TTL).unwrap();
    assert!(next > token, "{next} after {token}");
    assert!(
        view(&mut to, &key).is_some(),
        "the new hold is on the target"
    );
}

/// A waiter blocked on a lock whose slot is resharded away must not be
/// granted the lock on the old master while its holder keeps it on the new
/// one (two holders), and the old master must not put a lock key back into
/// the slot it is giving away (`CLUSTER SETSLOT NODE` then refuses, and the
/// reshard is stuck).
#[test]
fn a_waiter_is_not_granted_a_lock_that_moved_to_another_master() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let cluster_client = cluster.cluster_client();
    let mut client = cluster_connection(&cluster_client);
    let (source, target) = (&shards[0], &shards[1]);
    let tag = tag_on(&mut client, source, "moving");
    let key = format!("{tag}:lock");
    let slot = keyslot(&mut client, &key);
    let (held, _, _) = take(&mut client, &key, "holder", LONG_TTL).unwrap();
    let waiter = Waiter::spawn(
        &cluster_client,
        &["DLOCK.ACQUIRE", &key, "waiter", "60000", "BLOCK", "3000"],
    );
    wait_for_waiters(&mut client, &key, 1);

    reshard_with(&cluster, &shards, slot, &[&key], target.master, || {
        let mut from = cluster.node(source.master);
        let mut to = cluster.node(target.master);
        let _: () = redis::cmd("ASKING").query(&mut to).unwrap();
        let there = view(&mut to, &key).expect("the lock moved with its slot");
        assert_eq!(there.hold(), (Some("holder".to_string()), 1, held));
        // Watch the old master for a while: the slot must stay empty.
        let count = &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()];
        let watch = Instant::now() + Duration::from_millis(500);
        while Instant::now() < watch && exec_int(&mut from, count) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let left = exec_int(&mut from, count);
        // (Asked on the old master, a missing key of a migrating slot is an
        // ASK redirect, not a reply.)
        let back = try_view(&mut from, &key).ok().flatten();
        assert_eq!(
            left, 0,
            "the old master put {key} back into slot {slot} ({back:?}) while the \
             holder keeps it on the new master ({there:?})"
        );
    });
    // The waiter may be refused, redirected or time out; it must not have
    // been told that it holds the lock.
    let (reply, _) = waiter.handle.join().expect("the waiter thread panicked");
    if let Ok(value) = reply {
        let granted = grant(value);
        assert!(granted.is_none(), "the waiter was granted {granted:?}");
    }
}

// ---------------------------------------------------------------------------
// Hand-offs on every shard.
// ---------------------------------------------------------------------------

#[test]
fn blocked_waiters_get_the_lock_on_release_and_on_lease_expiry_on_every_shard() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let cluster_client = cluster.cluster_client();
    let mut client = cluster_connection(&cluster_client);

    // Release: the waiter blocked on another connection gets the lock at once.
    for shard in &shards {
        let tag = tag_on(&mut client, shard, "release");
        let key = format!("{tag}:lock");
        let (held, _, _) = take(&mut client, &key, "holder", LONG_TTL).unwrap();
        let waiter = Waiter::spawn(
            &cluster_client,
            &["DLOCK.ACQUIRE", &key, "waiter", "60000", "BLOCK", "20000"],
        );
        wait_for_waiters(&mut client, &key, 1);
        let released_at = now_ms();
        assert_eq!(give_back(&mut client, &key, "holder"), 0);
        let ((token, holds, owner), at) = waiter.granted();
        assert_eq!((holds, owner.as_slice()), (1, &b"waiter"[..]));
        assert!(token > held, "hand-off token {token} after {held}");
        assert!(
            at - released_at < 2_000,
            "the hand-off took {} ms",
            at - released_at
        );
        // The hand-off happened on the shard's master and reached its replica.
        let mut master = cluster.node(shard.master);
        let lock = view(&mut master, &key).unwrap();
        assert_eq!(lock.hold(), (Some("waiter".to_string()), 1, token));
        assert_eq!(wait_replicas(&mut master, 1, 5_000), 1);
        let mut replica = cluster.node(shard.replica());
        let _: () = redis::cmd("READONLY").query(&mut replica).unwrap();
        assert_eq!(view(&mut replica, &key).unwrap().hold(), lock.hold());
    }

    // Lease expiry, on all shards at once: nobody releases; each waiter gets
    // its lock once the lease has ended, not before.
    let ttl = 400;
    let mut pending = Vec::new();
    for shard in &shards {
        let tag = tag_on(&mut client, shard, "expiry");
        let key = format!("{tag}:lock");
        let (held, _, _) = take(&mut client, &key, "holder", ttl).unwrap();
        let deadline = pexpiretime(&mut cluster.node(shard.master), &key);
        let waiter = Waiter::spawn(
            &cluster_client,
            &["DLOCK.ACQUIRE", &key, "waiter", "60000", "BLOCK", "20000"],
        );
        pending.push((shard.master, key, held, deadline, waiter));
    }
    for (_, key, _, _, _) in &pending {
        wait_for_waiters(&mut client, key, 1);
    }
    for (master, key, held, deadline, waiter) in pending {
        let ((token, holds, owner), at) = waiter.granted();
        assert_eq!((holds, owner.as_slice()), (1, &b"waiter"[..]));
        assert!(token > held, "hand-off token {token} after {held}");
        assert!(
            at >= deadline,
            "granted at {at}, before the lease ended at {deadline}"
        );
        assert!(
            at - deadline < 2_000,
            "the hand-off came {} ms late",
            at - deadline
        );
        let lock = view(&mut cluster.node(master), &key).unwrap();
        assert_eq!(lock.hold(), (Some("waiter".to_string()), 1, token));
    }
}

// ---------------------------------------------------------------------------
// Hash tags.
// ---------------------------------------------------------------------------

/// Takes every lock in KEYS for ARGV[1] with a lease of ARGV[2] ms, or none:
/// returns the number taken, or nil (having given back what it took).
const TAKE_ALL: &str = r#"
local taken = {}
for _, key in ipairs(KEYS) do
  if not redis.call('DLOCK.ACQUIRE', key, ARGV[1], ARGV[2]) then
    for _, held in ipairs(taken) do
      redis.call('DLOCK.RELEASE', held, ARGV[1])
    end
    return false
  end
  table.insert(taken, key)
end
return #taken
"#;

fn take_all(
    conn: &mut impl ConnectionLike,
    keys: &[&str],
    owner: &str,
) -> redis::RedisResult<Value> {
    let mut command = redis::cmd("EVAL");
    command
        .arg(TAKE_ALL)
        .arg(keys.len())
        .arg(keys)
        .arg(owner)
        .arg(LONG_TTL);
    command.query(conn)
}

#[test]
fn hash_tagged_locks_share_a_slot_and_can_be_taken_together() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let mut client = cluster.client();
    let (payment, stock) = ("{order:42}:payment", "{order:42}:stock");

    // Only the tag is hashed: same slot as the bare tag, hence same master.
    let slot = keyslot(&mut client, "order:42");
    assert_eq!(keyslot(&mut client, payment), slot);
    assert_eq!(keyslot(&mut client, stock), slot);
    let home = shards.iter().find(|s| s.serves(slot)).unwrap();

    // Taken one by one through the cluster client: both on the one master.
    let (first, _, _) = take(&mut client, payment, "order-service", LONG_TTL).unwrap();
    let (second, _, _) = take(&mut client, stock, "order-service", LONG_TTL).unwrap();
    assert!(
        second > first,
        "tokens of one master increase: {first}, {second}"
    );
    let mut master = cluster.node(home.master);
    assert_eq!(exec_int(&mut master, &["EXISTS", payment, stock]), 2);
    for shard in shards.iter().filter(|s| s.master != home.master) {
        assert_eq!(exec_int(&mut cluster.node(shard.master), &["DBSIZE"]), 0);
    }
    assert_eq!(give_back(&mut client, payment, "order-service"), 0);
    assert_eq!(give_back(&mut client, stock, "order-service"), 0);

    // Same slot, so one script takes both or neither.
    assert!(take(&mut client, stock, "inventory", LONG_TTL).is_some());
    assert_eq!(
        take_all(&mut client, &[payment, stock], "checkout").unwrap(),
        Value::Nil
    );
    assert_eq!(
        exec_int(&mut master, &["EXISTS", payment]),
        0,
        "all or nothing"
    );
    assert_eq!(give_back(&mut client, stock, "inventory"), 0);
    assert_eq!(
        take_all(&mut client, &[payment, stock], "checkout").unwrap(),
        Value::Int(2)
    );
    for key in [payment, stock] {
        let lock = view(&mut master, key).unwrap();
        assert_eq!((lock.owner.as_deref(), lock.holds), (Some("checkout"), 1));
    }

    // Without a shared tag the keys fall in different slots, and a script
    // (or MULTI) over both is refused with CROSSSLOT.
    let (bare_payment, bare_stock) = ("order:42:payment", "order:42:stock");
    assert_ne!(
        keyslot(&mut client, bare_payment),
        keyslot(&mut client, bare_stock)
    );
    let error = take_all(&mut client, &[bare_payment, bare_stock], "checkout").unwrap_err();
    assert_eq!(error.code(), Some("CROSSSLOT"), "{error}");
    for key in [bare_payment, bare_stock] {
        assert_eq!(view(&mut client, key), None, "{key} was not taken");
    }
}

// ---------------------------------------------------------------------------
// Failover.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failover {
    /// `CLUSTER FAILOVER` on the replica: the master hands over cleanly.
    Manual,
    /// The master process is killed; the cluster promotes its replica.
    Crash,
}

/// Locks on one shard, acknowledged by `WAIT`, survive the failover with
/// the same owner, holds and token; the promoted replica issues larger
/// tokens than any the old master issued, and clients reach it.
fn acknowledged_locks_survive(how: Failover) {
    let mut cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let shard = shards[1].clone();
    let (old_master, promoted) = (shard.master, shard.replica());
    let mut client = cluster.client();
    let mut on_master = cluster.node(old_master);
    let tag = tag_on(&mut client, &shard, "failover");

    // The old master's counter far above the wall clock, so that only the
    // replicated tokens can keep the promoted replica's tokens above it.
    let seeded: u64 = 4_000_000_000_000_000_000;
    let seed_key = format!("{tag}:seed");
    let payload = seed_payload(seeded);
    let _: () = redis::cmd("RESTORE")
        .arg(&seed_key)
        .arg(0)
        .arg(payload)
        .query(&mut client)
        .expect("RESTORE the seed lock");

    // Locks over several slots of the shard: plain, re-entered, generated
    // owner, renewed; and locks taken then freed (their tokens count too).
    let keys = keys_on(&mut client, &shard, "failover", 6);
    let mut issued: Vec<i64> = vec![seeded as i64];
    let mut owners: Vec<String> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let owner = if i == 2 {
            "*".to_string()
        } else {
            format!("owner-{i}")
        };
        let (token, _, granted) = take(&mut client, key, &owner, LONG_TTL).unwrap();
        let owner = String::from_utf8(granted).unwrap();
        issued.push(token);
        match i {
            1 => assert_eq!(take(&mut client, key, &owner, LONG_TTL).unwrap().1, 2),
            3 => assert_eq!(
                exec_int(&mut client, &["DLOCK.RENEW", key, &owner, "900000"]),
                token
            ),
            4 | 5 => assert_eq!(give_back(&mut client, key, &owner), 0),
            _ => {}
        }
        owners.push(owner);
    }
    assert_eq!(issued[1], seeded as i64 + 1, "the seed raised the counter");
    let held: Vec<&String> = keys[..4].iter().collect();
    let before: Vec<LockView> = held
        .iter()
        .map(|key| view(&mut on_master, key).unwrap())
        .collect();
    let seed_before = view(&mut on_master, &seed_key).unwrap();
    let max_issued = *issued.iter().max().unwrap();

    assert_eq!(
        wait_replicas(&mut on_master, 1, 2_000),
        1,
        "the replica acknowledged every lock"
    );

    match how {
        Failover::Manual => {
            let mut replica = cluster.node(promoted);
            let _: () = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query(&mut replica)
                .expect("CLUSTER FAILOVER");
        }
        Failover::Crash => cluster.kill(old_master),
    }
    let after = cluster.settled("the failover", |now| {
        now.iter()
            .any(|s| s.master == promoted && s.slots == shard.slots)
            && match how {
                // The old master comes back as the new master's replica.
                Failover::Manual => now.iter().all(|s| s.replica.is_some()),
                Failover::Crash => true,
            }
    });
    let role: Vec<Value> = redis::cmd("ROLE")
        .query(&mut cluster.node(promoted))
        .unwrap();
    assert_eq!(role[0], Value::BulkString(b"master".to_vec()));
    let new_shard = after.iter().find(|s| s.master == promoted).unwrap();
    if how == Failover::Manual {
        assert_eq!(new_shard.replica, Some(old_master));
    }

    // Every acknowledged lock is on the promoted replica, unchanged.
    let mut on_promoted = cluster.node(promoted);
    for (key, was) in held.iter().zip(&before) {
        let now =
            view(&mut on_promoted, key).unwrap_or_else(|| panic!("{key} was lost in the failover"));
        assert_eq!(now.hold(), was.hold(), "{key}");
        assert!(
            now.pttl > 0 && now.pttl <= was.pttl,
            "{key}: {now:?} was {was:?}"
        );
    }
    assert_eq!(
        view(&mut on_promoted, &seed_key).unwrap().hold(),
        seed_before.hold()
    );
    for freed in &keys[4..] {
        assert_eq!(view(&mut on_promoted, freed), None, "{freed} was released");
    }

    // Clients reach the promoted replica; it refuses other owners and
    // issues larger tokens than any issued before on this shard.
    let mut fresh = cluster.client();
    assert_eq!(take(&mut fresh, &keys[0], "intruder", 1000), None);
    let (renewed, _, _) = take(&mut fresh, &keys[1], &owners[1], LONG_TTL).unwrap();
    assert_eq!(renewed, before[1].token, "re-entry keeps the token");
    for key in [&keys[4], &format!("{tag}:new")] {
        let (token, holds, _) = take(&mut fresh, key, "after", LONG_TTL).unwrap();
        assert_eq!(holds, 1);
        assert!(
            token > max_issued,
            "{key}: token {token} <= {max_issued} issued before"
        );
        assert!(
            view(&mut on_promoted, key).is_some(),
            "{key} is on the promoted node"
        );
    }
    // A hand-off there works as on any master.
    let waiter = Waiter::spawn(
        &cluster.cluster_client(),
        &["DLOCK.ACQUIRE", &keys[0], "next", "60000", "BLOCK", "20000"],
    );
    wait_for_waiters(&mut fresh, &keys[0], 1);
    assert_eq!(give_back(&mut fresh, &keys[0], &owners[0]), 0);
    let ((token, _, owner), _) = waiter.granted();
    assert_eq!(owner, b"next");
    assert!(token > max_issued);

    if how == Failover::Manual {
        // The client from before the failover follows MOVED to the new master.
        let lock = view(&mut client, &keys[3]).unwrap();
        assert_eq!(lock.hold(), before[3].hold());
        assert_eq!(give_back(&mut client, &keys[3], &owners[3]), 0);
        // The old master now redirects writes, and replicates the new state.
        let mut demoted = cluster.node(old_master);
        assert_eq!(
            moved(&mut demoted, &["DLOCK.ACQUIRE", &keys[3], "x", "1000"]).1,
            format!("127.0.0.1:{promoted}")
        );
        assert_eq!(wait_replicas(&mut on_promoted, 1, 5_000), 1);
        let _: () = redis::cmd("READONLY").query(&mut demoted).unwrap();
        assert_eq!(view(&mut demoted, &keys[3]), None);
        assert_eq!(
            view(&mut demoted, &keys[0]).unwrap().hold(),
            (Some("next".to_string()), 1, token)
        );
    }
}

#[test]
fn a_manual_failover_keeps_acknowledged_locks_and_tokens_keep_increasing() {
    acknowledged_locks_survive(Failover::Manual);
}

#[test]
fn a_killed_master_is_replaced_by_its_replica_with_its_acknowledged_locks() {
    acknowledged_locks_survive(Failover::Crash);
}

/// A waiter blocked on a master that a manual failover demotes can never be
/// granted there (a replica takes no decisions): it must be answered at
/// once (Redis replies `-UNBLOCKED` and closes the connection), not left
/// blocked, which with `BLOCK 0` is forever.
#[test]
fn a_waiter_on_a_demoted_master_is_answered_at_once() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let shard = shards[2].clone();
    let (old_master, promoted) = (shard.master, shard.replica());
    let mut client = cluster.client();
    let mut on_master = cluster.node(old_master);
    let key = format!("{}:lock", tag_on(&mut client, &shard, "demoted"));
    let (held, _, _) = take(&mut client, &key, "holder", LONG_TTL).unwrap();
    let waiter = {
        let key = key.clone();
        std::thread::spawn(move || {
            let mut conn = connect_port(old_master, READ_TIMEOUT);
            exec(
                &mut conn,
                &["DLOCK.ACQUIRE", &key, "waiter", "60000", "BLOCK", "0"],
            )
        })
    };
    wait_for_waiters(&mut on_master, &key, 1);
    assert_eq!(wait_replicas(&mut on_master, 1, 2_000), 1);

    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut cluster.node(promoted))
        .expect("CLUSTER FAILOVER");
    cluster.settled("the failover", |now| {
        now.iter()
            .any(|s| s.master == promoted && s.replica == Some(old_master))
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !waiter.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let blocked = info_field(&mut cluster.node(old_master), "clients", "blocked_clients");
    assert!(
        waiter.is_finished(),
        "the waiter is still blocked on the demoted master 5 s after the failover \
         (its blocked_clients: {blocked})"
    );
    match waiter.join().expect("the waiter thread panicked") {
        Err(error) => assert!(!error.is_timeout(), "the waiter timed out: {error}"),
        Ok(Value::Nil) => {}
        Ok(value) => panic!("a waiter on the demoted master got {value:?}"),
    }
    // The lock is the holder's on the new master, with nobody queued.
    let lock = view(&mut cluster.node(promoted), &key).unwrap();
    assert_eq!(lock.hold(), (Some("holder".to_string()), 1, held));
    assert_eq!(lock.waiting, 0);
}

/// CRC16 (XMODEM) as Redis Cluster hashes keys: an implementation of the
/// test's own, checked against `CLUSTER KEYSLOT`.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Reads one RESP frame from a raw connection as text lines (enough for
/// pub/sub messages and errors).
fn read_frame(reader: &mut std::io::BufReader<std::net::TcpStream>) -> Vec<String> {
    use std::io::{BufRead, Read};
    let mut line = String::new();
    reader.read_line(&mut line).expect("a frame");
    let line = line.trim_end_matches("\r\n").to_string();
    match line.split_at(1) {
        ("$", len) => {
            let len: usize = len.parse().expect("bulk length");
            let mut bytes = vec![0; len + 2];
            reader.read_exact(&mut bytes).expect("bulk");
            bytes.truncate(len);
            vec![String::from_utf8_lossy(&bytes).into_owned()]
        }
        ("*", n) | (">", n) => {
            let n: usize = n.parse().expect("array length");
            (0..n).flat_map(|_| read_frame(reader)).collect()
        }
        _ => vec![line],
    }
}

/// A raw connection to `port` that sent `SSUBSCRIBE channel`; returns it
/// with the first frame of the answer.
fn ssubscribe(port: u16, channel: &str) -> (std::io::BufReader<std::net::TcpStream>, Vec<String>) {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("read timeout");
    stream
        .write_all(&resp_command(&["SSUBSCRIBE", channel]))
        .expect("send");
    let mut reader = std::io::BufReader::new(stream);
    let first = read_frame(&mut reader);
    (reader, first)
}

/// The audit channel in Cluster: each event goes to the shard channel of
/// its key's slot (`<channel>{n}`, n the smallest integer hashing to that
/// slot), published by the master serving the slot to its shard, replica
/// included; the other masters do not serve that channel.
#[test]
fn audit_messages_go_to_the_shard_channel_of_the_key_slot() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    for port in cluster.live_ports() {
        config_set(
            &mut cluster.node(port),
            "dlock.audit-channel",
            "dlock-audit",
        );
    }
    let mut client = cluster.client();
    let key = "orders:42";
    let slot = keyslot(&mut client, key);
    let shard = shards
        .iter()
        .find(|shard| shard.serves(slot))
        .expect("a shard serves the slot")
        .clone();
    let tag = (0u32..)
        .find(|n| crc16(n.to_string().as_bytes()) % 16384 == slot)
        .expect("a tag");
    let channel = format!("dlock-audit{{{tag}}}");
    assert_eq!(keyslot(&mut client, &tag.to_string()), slot);
    assert_eq!(keyslot(&mut client, &channel), slot);

    let (mut on_master, confirmed) = ssubscribe(shard.master, &channel);
    assert_eq!(confirmed, ["ssubscribe", channel.as_str(), ":1"]);
    let (mut on_replica, confirmed) = ssubscribe(shard.replica(), &channel);
    assert_eq!(confirmed, ["ssubscribe", channel.as_str(), ":1"]);
    let other = shards
        .iter()
        .find(|other| !other.serves(slot))
        .expect("another shard");
    let (_, refused) = ssubscribe(other.master, &channel);
    assert!(refused[0].starts_with("-MOVED"), "{refused:?}");

    let (token_a, _, _) = take(&mut client, key, "a", LONG_TTL).expect("acquire");
    take(&mut client, key, "a", LONG_TTL).expect("re-entry");
    let waiter = Waiter::spawn(
        &cluster.cluster_client(),
        &["DLOCK.ACQUIRE", key, "b", "600000", "BLOCK", "0"],
    );
    wait_for_waiters(&mut client, key, 1);
    give_back(&mut client, key, "a");
    give_back(&mut client, key, "a");
    let ((token_b, _, _), _) = waiter.granted();

    let expected = [
        format!("event=acquire db=0 key=\"{key}\" owner=\"a\" token={token_a} holds=1"),
        format!("event=reenter db=0 key=\"{key}\" owner=\"a\" token={token_a} holds=2"),
        format!("event=release db=0 key=\"{key}\" owner=\"a\" token={token_a} holds=1"),
        format!("event=release db=0 key=\"{key}\" owner=\"a\" token={token_a} holds=0"),
        format!("event=handoff db=0 key=\"{key}\" owner=\"b\" token={token_b} holds=1"),
    ];
    for (name, reader) in [("master", &mut on_master), ("replica", &mut on_replica)] {
        for wanted in &expected {
            let frame = read_frame(reader);
            assert_eq!(frame.len(), 3, "{name}: {frame:?}");
            assert_eq!(
                (frame[0].as_str(), frame[1].as_str()),
                ("smessage", channel.as_str()),
                "{name}"
            );
            // The time field varies: compare the rest.
            let message = &frame[2];
            let without_time: String = {
                let (head, rest) = message.split_once(" time=").expect("a time field");
                let (_, tail) = rest.split_once(' ').expect("fields after time");
                format!("{head} {tail}")
            };
            assert_eq!(&without_time, wanted, "{name}: {message}");
        }
    }
}

// ---------------------------------------------------------------------------
// Shared holds.
// ---------------------------------------------------------------------------

/// Readers and a writer, and a semaphore whose permit ends by its lease, on
/// every shard: the writer waits for the readers and the reader behind it
/// waits for the writer; each shard's replica sees the same holders.
#[test]
fn readers_writers_and_semaphores_work_on_every_shard() {
    use sharedkit::{entry, holder_counts};
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let cluster_client = cluster.cluster_client();
    let mut client = cluster_connection(&cluster_client);
    let shared_take = |client: &mut ClusterConnection, key: &str, owner: &str, extra: &[&str]| {
        let mut args = vec!["DLOCK.ACQUIRE", key, owner, "60000", "SHARED"];
        args.extend_from_slice(extra);
        grant(exec(client, &args).unwrap_or_else(|e| panic!("{args:?}: {e}")))
    };
    for shard in &shards {
        let key = format!("{}:doc", tag_on(&mut client, shard, "rw"));
        let (r1, _, _) = shared_take(&mut client, &key, "r1", &[]).unwrap();
        let (r2, _, _) = shared_take(&mut client, &key, "r2", &[]).unwrap();
        let writer = Waiter::spawn(
            &cluster_client,
            &["DLOCK.ACQUIRE", &key, "w", "60000", "BLOCK", "20000"],
        );
        wait_for_waiters(&mut client, &key, 1);
        assert_eq!(shared_take(&mut client, &key, "r3", &[]), None);
        let late = Waiter::spawn(
            &cluster_client,
            &[
                "DLOCK.ACQUIRE",
                &key,
                "r3",
                "60000",
                "SHARED",
                "BLOCK",
                "20000",
            ],
        );
        wait_for_waiters(&mut client, &key, 2);
        let mut master = cluster.node(shard.master);
        assert_eq!(
            holder_counts(&mut master, &key),
            vec![entry("r1", 0, 1, r1), entry("r2", 0, 1, r2)]
        );
        for owner in ["r1", "r2"] {
            assert_eq!(
                exec_int(&mut client, &["DLOCK.RELEASE", &key, owner, "SHARED"]),
                0
            );
        }
        let ((w, holds, _), _) = writer.granted();
        assert_eq!(holds, 1);
        assert!(w > r2);
        assert_eq!(give_back(&mut client, &key, "w"), 0);
        let ((r3, _, owner), _) = late.granted();
        assert_eq!(owner, b"r3");
        assert!(r3 > w);
        assert_eq!(wait_replicas(&mut master, 1, 5_000), 1);
        let mut replica = cluster.node(shard.replica());
        let _: () = redis::cmd("READONLY").query(&mut replica).unwrap();
        assert_eq!(
            holder_counts(&mut replica, &key),
            vec![entry("r3", 0, 1, r3)]
        );

        // A one-permit semaphore handed on when the permit's lease ends.
        let key = format!("{}:api", tag_on(&mut client, shard, "sem"));
        let lapsed = exec(
            &mut client,
            &[
                "DLOCK.ACQUIRE",
                &key,
                "lapsed",
                "300",
                "SHARED",
                "LIMIT",
                "1",
            ],
        )
        .unwrap();
        let (held, _, _) = grant(lapsed).unwrap();
        let deadline = pexpiretime(&mut master, &key);
        let next = Waiter::spawn(
            &cluster_client,
            &[
                "DLOCK.ACQUIRE",
                &key,
                "next",
                "60000",
                "BLOCK",
                "20000",
                "LIMIT",
                "1",
                "SHARED",
            ],
        );
        let ((token, _, owner), at) = next.granted();
        assert_eq!(owner, b"next");
        assert!(token > held);
        assert!(
            at >= deadline,
            "granted at {at}, before the lease ended at {deadline}"
        );
        assert!(
            at - deadline < 2_000,
            "the hand-off came {} ms late",
            at - deadline
        );
        assert_eq!(wait_replicas(&mut master, 1, 5_000), 1);
        assert_eq!(
            holder_counts(&mut replica, &key),
            vec![entry("next", 0, 1, token)]
        );
    }
}

// ---------------------------------------------------------------------------
// The count-down latch.
// ---------------------------------------------------------------------------

/// Latches route on their key like locks: one on every master, `MOVED`
/// from the others, awaiters answered on each shard when the latch opens,
/// and the shard's replica follows.
#[test]
fn latches_route_on_their_key_and_open_on_every_shard() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let mut client = cluster.client();
    let cluster_client = cluster.cluster_client();
    for shard in &shards {
        let key = keys_on(&mut client, shard, "latch", 1).remove(0);
        assert_eq!(
            exec_int(&mut client, &["DLOCK.LATCH", &key, "2", "600000"]),
            1
        );
        let mut master = cluster.node(shard.master);
        assert_eq!(
            exec_int(&mut master, &["EXISTS", &key]),
            1,
            "{key} on its master"
        );
        let other = shards.iter().find(|s| s.master != shard.master).unwrap();
        let (slot, _) = moved(&mut cluster.node(other.master), &["DLOCK.COUNTDOWN", &key]);
        assert_eq!(slot, keyslot(&mut client, &key));
        let awaiter = Waiter::spawn(&cluster_client, &["DLOCK.AWAIT", &key, "0"]);
        wait_for_awaiters(&mut master, &key, 1);
        assert_eq!(exec_int(&mut client, &["DLOCK.COUNTDOWN", &key]), 1);
        assert_eq!(wait_replicas(&mut master, 1, 10_000), 1);
        let mut replica = cluster.node(shard.replica());
        exec(&mut replica, &["READONLY"]).unwrap();
        match exec(&mut replica, &["DLOCK.INFO", &key]).unwrap() {
            Value::Array(fields) => assert_eq!(fields.get(1), Some(&Value::Int(1)), "{key}"),
            other => panic!("{key} on the replica: {other:?}"),
        }
        assert_eq!(exec_int(&mut client, &["DLOCK.COUNTDOWN", &key]), 0);
        let (reply, _) = awaiter.handle.join().expect("the awaiter thread panicked");
        assert_eq!(reply.unwrap(), Value::Int(1), "{key} opened");
        assert_eq!(exec_int(&mut master, &["EXISTS", &key]), 0);
    }
}

/// A latch that MIGRATE takes to another master while a client awaits it
/// on the old one lives on there: the awaiter is answered null (as for a
/// timeout, at once, long before its own), never 0 ("closed without
/// opening"), and an AWAIT sent again follows the slot and sees it open.
/// A latch whose ttl ends is still answered 0 in a cluster.
#[test]
fn a_latch_that_migrates_answers_its_awaiters_null_and_opens_on_the_new_master() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let cluster_client = cluster.cluster_client();
    let mut client = cluster_connection(&cluster_client);
    let (source, target) = (&shards[0], &shards[1]);
    let key = format!("{}:gate", tag_on(&mut client, source, "latch"));
    let slot = keyslot(&mut client, &key);
    assert_eq!(
        exec_int(&mut client, &["DLOCK.LATCH", &key, "2", "600000"]),
        1
    );
    let mut on_source = cluster.node(source.master);
    let awaiting = {
        let key = key.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let reply = exec(&mut on_source, &["DLOCK.AWAIT", &key, "120000"]);
            (reply, started.elapsed())
        })
    };
    let mut from = cluster.node(source.master);
    wait_for_awaiters(&mut from, &key, 1);
    reshard(&cluster, &shards, slot, &[&key], target.master);

    let (reply, waited) = awaiting.join().expect("the awaiter thread panicked");
    assert_eq!(
        reply.expect("AWAIT on the old master"),
        Value::Nil,
        "an awaiter of a latch that moved was told it closed"
    );
    assert!(
        waited < Duration::from_secs(60),
        "the awaiter was answered by its own timeout ({waited:?}), not by the move"
    );
    let mut to = cluster.node(target.master);
    match exec(&mut to, &["DLOCK.INFO", &key]).unwrap() {
        Value::Array(fields) => assert_eq!(fields.get(1), Some(&Value::Int(2)), "{key}"),
        other => panic!("{key} on the new master: {other:?}"),
    }
    let again = Waiter::spawn(&cluster_client, &["DLOCK.AWAIT", &key, "60000"]);
    wait_for_awaiters(&mut to, &key, 1);
    assert_eq!(exec_int(&mut client, &["DLOCK.COUNTDOWN", &key]), 1);
    assert_eq!(exec_int(&mut client, &["DLOCK.COUNTDOWN", &key]), 0);
    let (reply, _) = again.handle.join().expect("the awaiter thread panicked");
    assert_eq!(
        reply.unwrap(),
        Value::Int(1),
        "{key} opened on its new master"
    );

    // A latch that ends by its ttl did close: 0, in a cluster too.
    let brief = format!("{}:brief", tag_on(&mut client, target, "latch"));
    assert_eq!(
        exec_int(&mut client, &["DLOCK.LATCH", &brief, "1", "3000"]),
        1
    );
    assert_eq!(
        exec(&mut client, &["DLOCK.AWAIT", &brief, "0"]).unwrap(),
        Value::Int(0),
        "a latch whose ttl ended is answered closed"
    );
}

/// DLOCK.MACQUIRE in a cluster: hash-tagged keys share a slot and are
/// taken together (one grant per key, all on the slot's master); keys in
/// different slots are refused by Redis with CROSSSLOT, and nothing is taken.
#[test]
fn multi_key_acquire_needs_one_slot() {
    let cluster = Cluster::start();
    let shards = cluster.settled("the cluster", |_| true);
    let mut client = cluster.client();
    let (payment, stock) = ("{order:7}:payment", "{order:7}:stock");
    let slot = keyslot(&mut client, payment);
    let home = shards.iter().find(|s| s.serves(slot)).unwrap();
    let mut master = cluster.node(home.master);
    let keys = exec(
        &mut master,
        &[
            "COMMAND",
            "GETKEYS",
            "DLOCK.MACQUIRE",
            "2",
            payment,
            stock,
            "me",
            "100",
        ],
    )
    .unwrap();
    assert_eq!(
        keys,
        Value::Array(vec![
            Value::BulkString(payment.as_bytes().to_vec()),
            Value::BulkString(stock.as_bytes().to_vec()),
        ])
    );
    let granted = exec(
        &mut client,
        &["DLOCK.MACQUIRE", "2", payment, stock, "checkout", "600000"],
    )
    .unwrap();
    match granted {
        Value::Array(grants) => assert_eq!(grants.len(), 2),
        other => panic!("not granted: {other:?}"),
    }
    assert_eq!(exec_int(&mut master, &["EXISTS", payment, stock]), 2);

    let (bare_payment, bare_stock) = ("order:7:payment", "order:7:stock");
    assert_ne!(
        keyslot(&mut client, bare_payment),
        keyslot(&mut client, bare_stock)
    );
    let error = exec(
        &mut master,
        &[
            "DLOCK.MACQUIRE",
            "2",
            bare_payment,
            bare_stock,
            "checkout",
            "600000",
        ],
    )
    .unwrap_err();
    assert!(
        matches!(error.code(), Some("CROSSSLOT") | Some("MOVED")),
        "{error}"
    );
    for key in [bare_payment, bare_stock] {
        assert_eq!(
            exec_int(&mut client, &["EXISTS", key]),
            0,
            "{key} was not taken"
        );
    }
}
