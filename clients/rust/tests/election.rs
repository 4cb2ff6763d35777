//! Leader election through the client (campaign, leader, observe, resign,
//! lost leadership, cancelled waits) and weighted semaphore permits, against
//! a real server. The tests that need `DLOCK.WATCH` or `WEIGHT` skip, saying
//! why, on a server without them.

use crate::common;
use crate::support;

use std::time::Duration;

use common::Server;
use dlock_client::{Error, Leader};
use support::{client_of, eventually, has_command, skip};

const PATIENCE: Duration = Duration::from_secs(10);

/// Clients blocked in a command on the server now (`INFO clients`).
fn blocked_clients(conn: &mut common::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("clients").query(conn).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(-1)
}

fn has_watch(conn: &mut common::Connection, test: &str) -> bool {
    let present = has_command(conn, "DLOCK.WATCH");
    if !present {
        skip(test, "the server has no DLOCK.WATCH yet (COMMAND INFO)");
    }
    present
}

/// Whether the server takes `WEIGHT` on a shared acquire with `LIMIT`.
fn has_weights(conn: &mut common::Connection, test: &str) -> bool {
    let reply = common::cmd(
        conn,
        &[
            "DLOCK.ACQUIRE",
            "dlock-client:weight-probe",
            "probe",
            "1000",
            "SHARED",
            "LIMIT",
            "2",
            "WEIGHT",
            "2",
        ],
    );
    let _ = common::cmd(conn, &["DEL", "dlock-client:weight-probe"]);
    if reply.is_err() {
        skip(test, "the server does not take WEIGHT yet");
    }
    reply.is_ok()
}

/// The next state of an observer, failing the test after `PATIENCE`.
async fn next_state(observer: &mut dlock_client::Observer) -> Option<Leader> {
    tokio::time::timeout(PATIENCE, observer.next())
        .await
        .expect("the observer saw a change in time")
        .expect("the observer read the change")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_leads_the_other_waits_and_takes_over_on_resign() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;
    let election = dlock.election("svc:leader");

    assert_eq!(election.leader().await.unwrap(), None, "nobody leads yet");
    let first = election.campaign("10.0.0.1:8080").await.unwrap();
    assert!(first.is_leader());
    assert_eq!(first.value(), b"10.0.0.1:8080");
    assert!(first.owner().starts_with(b"10.0.0.1:8080#"));
    assert_eq!(first.owner().len(), "10.0.0.1:8080".len() + 1 + 32);
    assert_eq!(
        common::info_owner(&mut conn, "svc:leader").as_deref(),
        Some(first.owner()),
        "the leader holds the election's key under its owner string"
    );
    assert_eq!(
        common::info_int(&mut conn, "svc:leader", "token") as u64,
        first.term(),
        "the term is the hold's fencing token"
    );
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.value, b"10.0.0.1:8080");
    assert_eq!(leader.owner, first.owner());
    assert_eq!(leader.term, first.term());
    assert!(leader.pttl.is_some_and(|pttl| pttl > Duration::ZERO));

    // Without a wait, a second candidate is refused at once.
    assert!(matches!(
        election
            .campaign_within("10.0.0.2:8080", Duration::ZERO)
            .await,
        Err(Error::Busy)
    ));
    assert!(matches!(
        election
            .campaign_within("10.0.0.2:8080", Duration::from_millis(50))
            .await,
        Err(Error::Busy)
    ));
    assert_eq!(common::waiting(&mut conn, "svc:leader"), 0);
    // A second candidate announcing the same value gets its own owner: it
    // queues instead of re-entering the first one's hold.
    let second = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("10.0.0.1:8080").await }
    });
    eventually("the second candidate queues", PATIENCE, || {
        common::waiting(&mut conn, "svc:leader") == 1
    })
    .await;
    assert!(!second.is_finished());
    let first_term = first.term();
    first.resign().await.unwrap();
    let second = tokio::time::timeout(PATIENCE, second)
        .await
        .expect("the second candidate leads after the resignation")
        .unwrap()
        .unwrap();
    assert!(second.term() > first_term, "terms grow");
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.owner, second.owner());
    assert_eq!(leader.term, second.term());
    second.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None, "none between terms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_sees_each_new_leader_and_none_between_terms() {
    let server = Server::start();
    let mut conn = server.connect();
    if !has_watch(
        &mut conn,
        "observer_sees_each_new_leader_and_none_between_terms",
    ) {
        return;
    }
    let dlock = client_of(&server).await;
    let follower = client_of(&server).await;
    let election = dlock.election("svc:leader");
    let mut observer = follower.election("svc:leader").observe();

    assert_eq!(next_state(&mut observer).await, None, "first: nobody leads");
    let a = election.campaign("host-a").await.unwrap();
    let seen = next_state(&mut observer).await.expect("host-a leads");
    assert_eq!(
        (seen.value.as_slice(), seen.term),
        (&b"host-a"[..], a.term())
    );
    assert_eq!(seen.owner, a.owner());

    // B campaigns behind A; A resigns and B takes over in the same step.
    let b = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("host-b").await }
    });
    eventually("host-b queues", PATIENCE, || {
        common::waiting(&mut conn, "svc:leader") == 1
    })
    .await;
    a.resign().await.unwrap();
    let b = b.await.unwrap().unwrap();
    let seen = next_state(&mut observer).await.expect("host-b leads");
    assert_eq!(
        (seen.value.as_slice(), seen.term),
        (&b"host-b"[..], b.term())
    );

    // B resigns with nobody behind: the observer sees the end of the term.
    b.resign().await.unwrap();
    assert_eq!(next_state(&mut observer).await, None, "none between terms");
    assert_eq!(observer.last_term(), Some(0));

    // A change while nobody reads is not lost: the next read gives it.
    let c = election.campaign("host-c").await.unwrap();
    let seen = next_state(&mut observer).await.expect("host-c leads");
    assert_eq!(seen.term, c.term());
    c.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_never_reads_a_stale_leader() {
    let server = Server::start();
    let mut conn = server.connect();
    if !has_watch(&mut conn, "an_observer_never_reads_a_stale_leader") {
        return;
    }
    let dlock = client_of(&server).await;
    let election = dlock.election("svc:leader");
    let mut observer = election.observe();
    let a = election.campaign("a").await.unwrap();
    assert_eq!(next_state(&mut observer).await.unwrap().term, a.term());
    // Three terms pass while the observer is not reading: it reads the
    // newest one at once, not the ones between.
    a.resign().await.unwrap();
    let b = election.campaign("b").await.unwrap();
    b.resign().await.unwrap();
    let c = election.campaign("c").await.unwrap();
    let seen = next_state(&mut observer).await.expect("c leads");
    assert_eq!((seen.value.as_slice(), seen.term), (&b"c"[..], c.term()));
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_ends_the_leadership_and_the_observer_sees_it() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;
    let election = dlock
        .election("svc:leader")
        .lease(Duration::from_millis(300));
    let leadership = election.campaign("host-a").await.unwrap();
    let watch = has_watch(
        &mut conn,
        "a_deleted_key_ends_the_leadership_and_the_observer_sees_it (observer part)",
    );
    let mut observer = election.observe();
    if watch {
        assert_eq!(
            next_state(&mut observer).await.unwrap().term,
            leadership.term()
        );
    }
    common::cmd(&mut conn, &["DEL", "svc:leader"]).unwrap();
    tokio::time::timeout(PATIENCE, leadership.lost())
        .await
        .expect("the watchdog's renewal finds the leadership gone");
    assert!(!leadership.is_leader());
    if watch {
        assert_eq!(next_state(&mut observer).await, None);
    }
    // Resigning a lost leadership is not an error.
    leadership.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_observer_or_a_campaign_leaves_nothing_on_the_server() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;
    let election = dlock.election("svc:leader");
    let leader = election.campaign("a").await.unwrap();

    // A campaign given up (its future dropped) leaves no waiter behind.
    let attempt = tokio::time::timeout(Duration::from_millis(100), election.campaign("b")).await;
    assert!(attempt.is_err(), "b cannot lead while a does");
    eventually("b's waiter leaves the queue", PATIENCE, || {
        common::waiting(&mut conn, "svc:leader") == 0
    })
    .await;

    if has_watch(
        &mut conn,
        "dropping_an_observer_or_a_campaign_leaves_nothing_on_the_server (observer part)",
    ) {
        let mut observer = election.observe();
        assert_eq!(next_state(&mut observer).await.unwrap().term, leader.term());
        let wait = tokio::time::timeout(Duration::from_millis(200), observer.next()).await;
        assert!(wait.is_err(), "no change while a leads");
        // The dropped wait was ended on the server (CLIENT UNBLOCK).
        eventually("the watcher is unblocked", PATIENCE, || {
            blocked_clients(&mut conn) == 0
        })
        .await;
        // The observer is still usable and misses nothing.
        let term = leader.term();
        leader.resign().await.unwrap();
        assert_eq!(next_state(&mut observer).await, None);
        assert!(term > 0);
    } else {
        leader.resign().await.unwrap();
    }
    assert!(common::info(&mut conn, "svc:leader").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_arguments_and_owner_strings() {
    let server = Server::start();
    let dlock = client_of(&server).await;
    let election = dlock.election("svc:leader");
    assert!(matches!(
        election.campaign("").await,
        Err(Error::InvalidArgument(_))
    ));
    let long = vec![b'x'; dlock_client::MAX_VALUE_LEN + 1];
    assert!(matches!(
        election.campaign(&long).await,
        Err(Error::InvalidArgument(_))
    ));
    // The longest value fits in the server's owner limit; `#` in a value
    // survives (the id follows the last one).
    let mut value = vec![b'y'; dlock_client::MAX_VALUE_LEN - 2];
    value.extend_from_slice(b"#z");
    let leadership = election.campaign(&value).await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.value, value);
    leadership.resign().await.unwrap();

    // A hold taken outside an election reads as its whole owner.
    let mut conn = server.connect();
    common::cmd(
        &mut conn,
        &["DLOCK.ACQUIRE", "svc:leader", "plain", "10000"],
    )
    .unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.owner.as_slice(), leader.value.as_slice()),
        (&b"plain"[..], &b"plain"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_permits_add_up_to_the_limit_in_fifo_order() {
    let server = Server::start();
    let mut conn = server.connect();
    let dlock = client_of(&server).await;
    // Checked before anything is sent, on any server.
    assert!(matches!(
        dlock.semaphore("pool", 4).weight(5).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        dlock.semaphore("pool", 4).weight(0).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        dlock.read_lock("pool").weight(2).acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    if !has_weights(
        &mut conn,
        "weighted_permits_add_up_to_the_limit_in_fifo_order",
    ) {
        return;
    }
    let three = dlock
        .semaphore("pool", 4)
        .weight(3)
        .acquire()
        .await
        .unwrap();
    assert_eq!(three.weight(), 3);
    let holders = common::info(&mut conn, "pool").unwrap();
    let weight_of_holder =
        holders
            .iter()
            .find(|(name, _)| name == "holders")
            .and_then(|(_, value)| match value {
                redis::Value::Array(entries) => match entries.first() {
                    Some(redis::Value::Array(entry)) => entry.get(5).cloned(),
                    _ => None,
                },
                _ => None,
            });
    assert_eq!(
        weight_of_holder,
        Some(redis::Value::Int(3)),
        "WEIGHT 3 sent"
    );
    // 3 + 2 > 4: refused; 3 + 1 fits.
    assert!(matches!(
        dlock.semaphore("pool", 4).weight(2).acquire().await,
        Err(Error::Busy)
    ));
    let one = dlock.semaphore("pool", 4).acquire().await.unwrap();
    assert_eq!(one.weight(), 1);
    one.release().await.unwrap();

    // A heavy head blocks a light request behind it (no barging).
    let heavy = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .semaphore("pool", 4)
                .weight(4)
                .wait_forever()
                .acquire()
                .await
        }
    });
    eventually("the heavy request queues", PATIENCE, || {
        common::waiting(&mut conn, "pool") == 1
    })
    .await;
    let light = tokio::spawn({
        let dlock = dlock.clone();
        async move {
            dlock
                .semaphore("pool", 4)
                .weight(1)
                .wait_forever()
                .acquire()
                .await
        }
    });
    eventually("the light request queues behind it", PATIENCE, || {
        common::waiting(&mut conn, "pool") == 2
    })
    .await;
    assert!(
        !light.is_finished(),
        "a light request does not pass the heavy head"
    );
    three.release().await.unwrap();
    let heavy = tokio::time::timeout(PATIENCE, heavy)
        .await
        .expect("the heavy request is granted")
        .unwrap()
        .unwrap();
    assert_eq!(heavy.weight(), 4);
    assert!(!light.is_finished(), "4 of 4 permits held");
    heavy.release().await.unwrap();
    let light = tokio::time::timeout(PATIENCE, light)
        .await
        .expect("the light request is granted")
        .unwrap()
        .unwrap();
    light.release().await.unwrap();
    assert!(common::info(&mut conn, "pool").is_none());
}
