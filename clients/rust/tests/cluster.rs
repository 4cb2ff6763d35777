//! The client against a Redis Cluster of three masters: locks on keys of
//! every shard (hash tags choose the slot), renewals across shards, a
//! blocking wait and its cancellation routed to the right node, a
//! multi-lock whose keys share a slot, and no lock command sent twice when
//! a connection breaks before its reply (R5.1), through a proxy the master
//! announces as its address.

use crate::common;
use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;
use dlock_client::Error;
use support::{cut_a_blocked_acquire, eventually, has_command, skip, CuttingProxy};

struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3).map(|_| Server::cluster_node("2000")).collect();
        let cli = std::env::var("DLOCK_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string());
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Cluster { nodes };
        for node in &cluster.nodes {
            let mut conn = node.connect();
            common::wait_until("the cluster is ok on every node", || {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut conn)
                    .unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            });
        }
        cluster
    }

    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// A connection to the node serving `key`, and that node's port.
    fn node_of(&self, key: &str) -> common::Connection {
        self.serving(key).1
    }

    /// Makes the master on `port` announce `announced` as its port (in
    /// CLUSTER SLOTS and redirections), and waits until every node says so.
    fn announce_port(&self, port: u16, announced: u16) {
        let node = self.nodes.iter().find(|n| n.port == port).expect("a node");
        let mut conn = node.connect();
        common::cmd(
            &mut conn,
            &[
                "CONFIG",
                "SET",
                "cluster-announce-port",
                &announced.to_string(),
            ],
        )
        .expect("CONFIG SET cluster-announce-port");
        let address = format!("127.0.0.1:{announced}@");
        for node in &self.nodes {
            let mut conn = node.connect();
            common::wait_until("every node knows the announced port", || {
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut conn)
                    .unwrap_or_default();
                nodes.contains(&address)
            });
        }
    }

    fn serving(&self, key: &str) -> (u16, common::Connection) {
        for node in &self.nodes {
            let mut conn = node.connect();
            // A node that serves the slot answers a keyed read; the others
            // answer MOVED.
            match common::cmd(&mut conn, &["DLOCK.INFO", key]) {
                Err(error) if error.code() == Some("MOVED") => continue,
                _ => return (node.port, conn),
            }
        }
        panic!("no node serves {key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_shard_with_hash_tags() {
    let cluster = Cluster::start();
    let dlock = dlock_client::Client::cluster(cluster.urls()).await.unwrap();

    // Keys spread over the shards; each guard is renewed on its own node.
    let keys: Vec<String> = (0..9).map(|i| format!("{{order:{i}}}:lock")).collect();
    let mut guards = Vec::new();
    for key in &keys {
        guards.push(
            dlock
                .lock(key)
                .lease(Duration::from_millis(300))
                .acquire()
                .await
                .unwrap(),
        );
    }
    let served_by: std::collections::HashSet<u16> =
        keys.iter().map(|key| cluster.serving(key).0).collect();
    assert_eq!(served_by.len(), 3, "the keys cover every shard");
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (key, guard) in keys.iter().zip(&guards) {
        assert!(guard.is_held(), "{key} renewed across the cluster");
        let mut conn = cluster.node_of(key);
        assert_eq!(
            common::info_owner(&mut conn, key).as_deref(),
            Some(guard.owner())
        );
        assert_eq!(
            common::info_int(&mut conn, key, "token") as u64,
            guard.token()
        );
    }
    // Busy, and a blocking wait handed the lock on release, on its node.
    assert!(matches!(
        dlock.lock(&keys[4]).acquire().await,
        Err(Error::Busy)
    ));
    let waiter = tokio::spawn({
        let dlock = dlock.clone();
        let key = keys[4].clone();
        async move {
            dlock
                .lock(key)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    let mut node = cluster.node_of(&keys[4]);
    eventually("the wait is queued", Duration::from_secs(5), || {
        common::waiting(&mut node, &keys[4]) == 1
    })
    .await;
    let mut guards = guards.into_iter();
    let mut rest: Vec<_> = Vec::new();
    for (i, guard) in guards.by_ref().enumerate() {
        if i == 4 {
            guard.release().await.unwrap();
        } else {
            rest.push(guard);
        }
    }
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(
        common::info_owner(&mut node, &keys[4]).as_deref(),
        Some(next.owner())
    );
    next.release().await.unwrap();

    // A cancelled wait leaves the queue on its node (CLIENT UNBLOCK routed
    // to the node of the key).
    let attempt = dlock.lock(&keys[5]).wait_forever().acquire();
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_millis(300), attempt).await;
    assert!(outcome.is_err(), "the wait ended by itself: {outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let mut node = cluster.node_of(&keys[5]);
    eventually(
        "the cancelled wait leaves its queue",
        Duration::from_secs(2),
        || common::waiting(&mut node, &keys[5]) == 0,
    )
    .await;
    for guard in rest {
        guard.release().await.unwrap();
    }
    for key in &keys {
        let mut conn = cluster.node_of(key);
        assert!(common::info(&mut conn, key).is_none(), "{key} released");
    }

    // A multi-lock over keys of one slot (a hash tag).
    let mut any = cluster.nodes[0].connect();
    if has_command(&mut any, "DLOCK.MACQUIRE") {
        let guard = dlock
            .multi_lock(["{bank}:a", "{bank}:b"])
            .acquire()
            .await
            .unwrap();
        assert_eq!(guard.tokens().count(), 2);
        guard.release().await.unwrap();
        let mut node = cluster.node_of("{bank}:a");
        assert!(common::info(&mut node, "{bank}:a").is_none());
    } else {
        skip(
            "the Cluster multi-lock",
            "the server has no DLOCK.MACQUIRE yet",
        );
    }
}

fn setslot(conn: &mut common::Connection, slot: i64, state: &str, node: &str) {
    let slot = slot.to_string();
    common::cmd(conn, &["CLUSTER", "SETSLOT", &slot, state, node])
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state}: {e}"));
}

fn node_id(conn: &mut common::Connection) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(conn)
        .expect("CLUSTER MYID")
}

/// The client follows a slot that moves to another master (the redis
/// crate's retries, which would follow redirections, are off): `ASK`
/// while the slot migrates, then `MOVED` for every command and for the
/// watchdog's renewals once it has moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_ask_and_moved_while_a_slot_moves() {
    let cluster = Cluster::start();
    let dlock = dlock_client::Client::cluster(cluster.urls()).await.unwrap();
    let (held, fresh) = ("{move}:held", "{move}:fresh");
    let mut moving = SlotMove::of(&cluster, held);

    let lease = Duration::from_millis(500);
    let guard = dlock.lock(held).lease(lease).acquire().await.unwrap();
    moving.begin();

    // A lock the source does not have: ASK, then ASKING on the target.
    let asked = dlock.lock(fresh).acquire().await.unwrap();
    common::cmd(&mut moving.target, &["ASKING"]).unwrap();
    assert_eq!(
        common::info_owner(&mut moving.target, fresh).as_deref(),
        Some(asked.owner()),
        "granted on the importing master"
    );

    moving.migrate(&cluster, &[held]);

    // MOVED: the renewals follow the slot (two leases pass) ...
    tokio::time::sleep(lease * 2).await;
    assert!(guard.is_held(), "renewed on the new master");
    assert_eq!(
        common::info_int(&mut moving.target, held, "token") as u64,
        guard.token()
    );
    // ... and so do acquires and releases.
    assert!(matches!(dlock.lock(held).acquire().await, Err(Error::Busy)));
    guard.release().await.unwrap();
    asked.release().await.unwrap();
    assert!(common::info(&mut moving.target, held).is_none());
    assert!(common::info(&mut moving.target, fresh).is_none());
}

/// A slot moved by hand from the master serving `key` to another one.
struct SlotMove {
    source: common::Connection,
    target: common::Connection,
    target_port: u16,
    slot: i64,
    source_id: String,
    target_id: String,
}

impl SlotMove {
    fn of(cluster: &Cluster, key: &str) -> SlotMove {
        let (source_port, mut source) = cluster.serving(key);
        let target_node = cluster.nodes.iter().find(|n| n.port != source_port);
        let target_port = target_node.expect("another master").port;
        let mut target = target_node.expect("another master").connect();
        let slot = common::int(&mut source, &["CLUSTER", "KEYSLOT", key]);
        let (source_id, target_id) = (node_id(&mut source), node_id(&mut target));
        SlotMove {
            source,
            target,
            target_port,
            slot,
            source_id,
            target_id,
        }
    }

    /// SETSLOT IMPORTING on the target, MIGRATING on the source.
    fn begin(&mut self) {
        setslot(&mut self.target, self.slot, "IMPORTING", &self.source_id);
        setslot(&mut self.source, self.slot, "MIGRATING", &self.target_id);
    }

    /// MIGRATE of `keys`, then SETSLOT NODE on every master.
    fn migrate(&mut self, cluster: &Cluster, keys: &[&str]) {
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(self.target_port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys)
            .query(&mut self.source)
            .expect("MIGRATE");
        for node in &cluster.nodes {
            setslot(&mut node.connect(), self.slot, "NODE", &self.target_id);
        }
    }
}

/// The re-entry count of `key`'s exclusive holder (0 when not held).
fn holds(conn: &mut common::Connection, key: &str) -> i64 {
    // One DLOCK.INFO: the release of R5.3 runs in the background (R4.7),
    // so the key may be gone by a second look.
    let Some(fields) = common::info(conn, key) else {
        return 0;
    };
    match fields.iter().find(|(name, _)| name == "holds") {
        Some((_, common::Value::Int(value))) => *value,
        other => panic!("field holds of {key}: {other:?}"),
    }
}

/// R5.1 and R5.3 in a Cluster: a lock command whose connection breaks after
/// it reached the server is never sent again; the caller gets the
/// connection error, and an acquire of a generated owner is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_never_followed_by_a_second_send() {
    let cluster = Cluster::start();
    let key = "{cut}:lock";
    let (port, mut direct) = cluster.serving(key);
    let proxy = CuttingProxy::start(port).await;
    cluster.announce_port(port, proxy.port);
    let dlock = dlock_client::Client::cluster(cluster.urls()).await.unwrap();

    // An immediate acquire: granted once by the server, reply lost.
    proxy.arm("DLOCK.ACQUIRE");
    let attempt = dlock.lock(key).acquire().await;
    assert!(
        matches!(&attempt, Err(error) if error.is_connection_error()),
        "a connection error, not a second grant: {attempt:?}"
    );
    assert_eq!(proxy.seen(), 1, "DLOCK.ACQUIRE sent once");
    // R5.3: the generated owner is released, in the background (R4.7).
    eventually("no hold left", Duration::from_secs(5), || {
        holds(&mut direct, key) == 0
    })
    .await;

    // A re-entrant release: exactly one of the two holds given back.
    let outer = dlock.lock(key).owner("job-7").acquire().await.unwrap();
    let inner = dlock.lock(key).owner("job-7").acquire().await.unwrap();
    assert_eq!(holds(&mut direct, key), 2);
    proxy.arm("DLOCK.RELEASE");
    let released = inner.release().await;
    assert!(
        matches!(&released, Err(error) if error.is_connection_error()),
        "a connection error: {released:?}"
    );
    assert_eq!(proxy.seen(), 1, "DLOCK.RELEASE sent once");
    assert_eq!(holds(&mut direct, key), 1, "the outer hold remains");

    // A blocking acquire on its own connection, cut while it waits.
    cut_a_blocked_acquire(&dlock, &proxy, &mut direct, key).await;
    assert_eq!(
        common::info_owner(&mut direct, key).as_deref(),
        Some(&b"job-7"[..])
    );
    assert_eq!(holds(&mut direct, key), 1);
    outer.release().await.unwrap();
    assert_eq!(holds(&mut direct, key), 0);
}

/// A latch wait whose latch moves to another master while it waits (the old
/// master answers its awaiters null, not "closed": docs/commands.md): the
/// client sends the wait again to the key's new master with the rest of its
/// wait, and it ends `Opened` when the latch opens there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wait_follows_its_latch_to_the_new_master() {
    let cluster = Cluster::start();
    let dlock = dlock_client::Client::cluster(cluster.urls()).await.unwrap();
    let gate = "{migrating-latch}:gate";
    let mut moving = SlotMove::of(&cluster, gate);
    assert_eq!(
        common::int(&mut moving.source, &["DLOCK.LATCH", gate, "2", "60000"]),
        1
    );
    let wait = tokio::spawn({
        let dlock = dlock.clone();
        async move { dlock.latch(gate).wait(Duration::from_secs(30)).await }
    });
    eventually(
        "the wait queued on the old master",
        common::PATIENCE,
        || common::waiting(&mut moving.source, gate) == 1,
    )
    .await;

    moving.begin();
    moving.migrate(&cluster, &[gate]);
    eventually(
        "the wait sent again to the new master",
        common::PATIENCE,
        || {
            assert!(!wait.is_finished(), "the wait ended when its latch moved");
            common::waiting(&mut moving.target, gate) == 1
        },
    )
    .await;
    for _ in 0..2 {
        common::int(&mut moving.target, &["DLOCK.COUNTDOWN", gate]);
    }
    let outcome = wait.await.unwrap().expect("the latch wait");
    assert_eq!(outcome, dlock_client::LatchWait::Opened);
}

/// A blocking wait whose lock moves to another master while it waits
/// (`MIGRATE` takes the key, the old master answers its waiters null): the
/// client sends the wait again to the key's new master with the rest of
/// its wait, so the wait is handed the lock there, once; and a wait whose
/// rest runs out there ends not acquired by its original deadline, not
/// when the key moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_follows_its_lock_to_the_new_master_within_its_deadline() {
    let cluster = Cluster::start();
    let dlock = dlock_client::Client::cluster(cluster.urls()).await.unwrap();
    let (handed, timing_out) = ("{migrate}:handed", "{migrate}:timing-out");
    let mut moving = SlotMove::of(&cluster, handed);
    for key in [handed, timing_out] {
        common::acquire(&mut moving.source, key, "holder", 30_000).expect("hold the key");
    }

    let handed_wait = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .lock(handed)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    let short_wait = Duration::from_secs(3);
    let timing_out_wait = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            let started = Instant::now();
            let outcome = dlock.lock(timing_out).wait(short_wait).acquire().await;
            (outcome, started.elapsed())
        }
    });
    eventually(
        "both waits queued on the old master",
        common::PATIENCE,
        || {
            common::waiting(&mut moving.source, handed) == 1
                && common::waiting(&mut moving.source, timing_out) == 1
        },
    )
    .await;

    moving.begin();
    moving.migrate(&cluster, &[handed, timing_out]);
    eventually(
        "both waits sent again to the new master",
        common::PATIENCE,
        || {
            assert!(
                !handed_wait.is_finished() && !timing_out_wait.is_finished(),
                "a wait ended when its lock moved"
            );
            common::waiting(&mut moving.target, handed) == 1
                && common::waiting(&mut moving.target, timing_out) == 1
        },
    )
    .await;

    // The holder releases on the new master: the wait is handed the lock.
    assert_eq!(
        common::release(&mut moving.target, handed, "holder"),
        0,
        "no hold left"
    );
    let guard = handed_wait
        .await
        .unwrap()
        .expect("the wait is handed the lock");
    assert_eq!(
        common::info_owner(&mut moving.target, handed).as_deref(),
        Some(guard.owner())
    );
    assert_eq!(holds(&mut moving.target, handed), 1, "granted once");

    // The other wait ends not acquired, by its own deadline.
    let (outcome, took) = timing_out_wait.await.unwrap();
    assert!(
        matches!(outcome, Err(Error::Busy)),
        "not acquired: {outcome:?}"
    );
    assert!(
        took >= short_wait - Duration::from_millis(50),
        "ended after {took:?}, before its wait of {short_wait:?}"
    );
    assert!(
        took < short_wait + Duration::from_secs(2),
        "ended after {took:?}, past its wait plus the margin"
    );
    assert_eq!(common::waiting(&mut moving.target, timing_out), 0);
    assert_eq!(
        common::info_owner(&mut moving.target, timing_out).as_deref(),
        Some(&b"holder"[..])
    );
    guard.release().await.unwrap();
    assert!(common::info(&mut moving.target, handed).is_none());
}
