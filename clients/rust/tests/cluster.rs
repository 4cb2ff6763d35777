//! The client against a Redis Cluster of three masters: locks on keys of
//! every shard (hash tags choose the slot), renewals across shards, a
//! blocking wait and its cancellation routed to the right node, and a
//! multi-lock whose keys share a slot.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;
use dlock_client::Error;
use support::{eventually, has_command, skip};

struct Cluster {
    nodes: Vec<Server>,
}

fn bus_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener
        .local_addr()
        .expect("local address")
        .port()
        .to_string()
}

impl Cluster {
    fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                let bus = bus_port();
                Server::with_args(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",
                    &bus,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
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
    assert!(tokio::time::timeout(Duration::from_millis(300), attempt)
        .await
        .is_err());
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
